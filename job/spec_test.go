package job

import "testing"

func TestNewSpec(t *testing.T) {
	t.Parallel()
	schema := []byte(`{"type": "object", "required": ["order_id"], "properties": {"order_id": {"type": "string"}}}`)
	spec, err := NewSpec("shipment.book", schema, "shipment:{order_id}", "order:{order_id}")
	if err != nil {
		t.Fatal(err)
	}
	p, err := spec.Decode([]byte(`{"order_id": "o-1"}`))
	if err != nil || p.BusinessKey != "shipment:o-1" || p.Resource != "order:o-1" || spec.Queue != "default" {
		t.Fatalf("Decode: %+v %v (queue %q)", p, err, spec.Queue)
	}
	if spec, err := NewSpec("a", schema, "a:{order_id}", ""); err != nil || !spec.Resource.IsZero() {
		t.Fatalf("no resource: %+v %v", spec, err)
	}
	for name, args := range map[string][3]string{
		"bad schema":   {`{"type": 3}`, "k:{order_id}", ""},
		"bad key":      {string(schema), "k:{", ""},
		"bad resource": {string(schema), "k:{order_id}", "r:{}"},
	} {
		if _, err := NewSpec("t", []byte(args[0]), args[1], args[2]); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
