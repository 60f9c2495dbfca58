package cli

import (
	"slices"
	"testing"
)

func TestClosersCloseInReverseOnce(t *testing.T) {
	t.Parallel()
	var got []string
	var c closers
	for _, name := range []string{"postgres", "redis", "store"} {
		c.push(func() { got = append(got, name) })
	}
	c.close()
	c.close()
	if want := []string{"store", "redis", "postgres"}; !slices.Equal(got, want) {
		t.Fatalf("closed %q, want %q (reverse order, once)", got, want)
	}
}
