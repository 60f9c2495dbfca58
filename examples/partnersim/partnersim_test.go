package partnersim_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/examples/partnersim"
)

func post(t *testing.T, url, key, body string) (*http.Response, string, error) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b), nil
}

func TestRepeatedKeyAppliesOnce(t *testing.T) {
	t.Parallel()
	sim := partnersim.New(partnersim.Options{})
	ts := httptest.NewServer(sim)
	defer ts.Close()
	var wg sync.WaitGroup
	bodies := make([]string, 20)
	for i := range bodies {
		wg.Go(func() {
			resp, body, err := post(t, ts.URL+"/charges", "pay_1", `{"amount_cents":100}`)
			if err != nil || resp.StatusCode != 201 {
				t.Errorf("charge: %v %v", resp, err)
			}
			bodies[i] = body
		})
	}
	wg.Wait()
	for _, b := range bodies {
		if b != bodies[0] {
			t.Fatalf("replays differ: %q vs %q", b, bodies[0])
		}
	}
	if st := sim.Stats(); st.Applied != 1 || st.Replayed != 19 || st.Requests != 20 {
		t.Fatalf("stats %+v, want 1 applied, 19 replayed", st)
	}
	if resp, _, _ := post(t, ts.URL+"/charges", "pay_1", `{"amount_cents":999}`); resp.StatusCode != 422 {
		t.Fatalf("same key, other body: %d, want 422", resp.StatusCode)
	}
	if resp, _, _ := post(t, ts.URL+"/charges", "", `{}`); resp.StatusCode != 400 {
		t.Fatalf("no key: %d, want 400", resp.StatusCode)
	}
	resp, err := http.Get(ts.URL + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st partnersim.Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.Applied != 1 {
		t.Fatalf("GET /stats = %+v, %v", st, err)
	}
}

func TestFailAndDrop(t *testing.T) {
	t.Parallel()
	always := func() float64 { return 0 }
	fail := httptest.NewServer(partnersim.New(partnersim.Options{FailRate: 1, Rand: always}))
	defer fail.Close()
	if resp, _, err := post(t, fail.URL+"/messages", "m1", `{}`); err != nil || resp.StatusCode != 503 {
		t.Fatalf("fail-rate 1: %v %v", resp, err)
	}
	sim := partnersim.New(partnersim.Options{DropRate: 1, Rand: always})
	drop := httptest.NewServer(sim)
	defer drop.Close()
	if _, _, err := post(t, drop.URL+"/messages", "m1", `{}`); err == nil {
		t.Fatal("drop-rate 1 answered")
	}
	if st := sim.Stats(); st.Applied != 1 {
		t.Fatalf("a dropped request must still be applied: %+v", st)
	}
}
