package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{File: "f.yaml", Line: 3, Key: "a.b", Message: "bad"}, "f.yaml:3: a.b: bad"},
		{Error{File: "f.yaml", Key: "a.b", Message: "bad"}, "f.yaml: a.b: bad"},
		{Error{File: "f.yaml", Line: 3, Message: "bad"}, "f.yaml:3: bad"},
		{Error{Key: "a", Message: "bad"}, "a: bad"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("%+v.Error() = %q, want %q", tc.e, got, tc.want)
		}
	}

	_, err := Parse([]byte("store: mongo\nlisten: nope\n"), "f.yaml", nil)
	list := problems(t, err)
	if len(list) < 2 {
		t.Fatalf("problems = %v, want at least store and listen", list)
	}
	var first Error
	if !errors.As(err, &first) || first != list[0] {
		t.Errorf("errors.As(err, *Error) = %+v, want the first problem %+v", first, list[0])
	}
	if list[0].Key != "store" || list[0].Line != 1 || list[1].Key != "listen" || list[1].Line != 2 {
		t.Errorf("problems out of file order: %v", list)
	}

	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml"), nil); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load of a missing file: %v, want os.ErrNotExist", err)
	}
}
