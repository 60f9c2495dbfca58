package memstore

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/idemgate/idemgate/middleware/idempotency"
)

func TestResponseCodecRoundTrips(t *testing.T) {
	t.Parallel()
	for _, resp := range []idempotency.Response{
		{Status: 201, Header: http.Header{"Location": {"/v1/x/1"}, "Vary": {"Accept", "Origin"}, "X-Empty": {""}}, Body: []byte("{\"id\":1}\x00\xff")},
		{Status: 204},
		{Status: 200, Header: http.Header{"Content-Type": {"text/plain"}}},
		{Status: 200, Body: make([]byte, 70000)},
	} {
		got := decodeResponse(encodeResponse(resp))
		got.Status, got.BodyOmitted = resp.Status, resp.BodyOmitted
		if !reflect.DeepEqual(got, resp) {
			t.Errorf("round trip of %+v gave %+v", resp, got)
		}
	}
	omitted := decodeResponse(encodeResponse(idempotency.Response{Status: 200, Body: []byte("big"), BodyOmitted: true}))
	if omitted.Body != nil {
		t.Errorf("an omitted body was kept: %q", omitted.Body)
	}
}
