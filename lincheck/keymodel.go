package lincheck

import "fmt"

// Request is a client's call with a key: one HTTP exchange, retries being
// operations of their own.
type Request struct{}

// Answer is what a Request got. Status 0 is no answer (a connection error
// or a timeout).
type Answer struct {
	Status int
	// ID is the answer's identity: the charge id of a proxied answer, the
	// id of a job document, or a hash of the body.
	ID string
}

// Final reports whether the answer is a 2xx, the one kind of answer the
// model constrains: 409, 429 and 5xx promise no effect, and a connection
// error promises nothing.
func (a Answer) Final() bool { return a.Status >= 200 && a.Status < 300 }

// Apply is the upstream applying a key's request (a proxied request or a
// job's delivery) with the fencing token it carried; it has no output.
type Apply struct {
	Token int64
}

// KeyRules chooses the promises KeyModel checks.
type KeyRules struct {
	// Answers: every final 2xx answer to a key has the identity of the
	// first one.
	Answers bool
	// Tokens: every application's token is above every application's
	// before it.
	Tokens bool
}

// keyState is a key's state in KeyModel: the identity of its first final
// answer, and the highest token applied so far (0: none).
type keyState struct {
	answer  string
	applied bool
	highest int64
}

// KeyModel is idemgate's promise about one key, seen from outside: the
// clients' answers and the upstream's applications. An answer that is not
// final and a request left out (no answer) change nothing.
func KeyModel(r KeyRules) Model {
	name := "key model"
	switch {
	case r.Answers && !r.Tokens:
		name += " (answers only)"
	case r.Tokens && !r.Answers:
		name += " (tokens only)"
	}
	return Model{
		Name: name,
		// Fewer answers cannot disagree more, fewer applications cannot
		// fall where more rose.
		Monotone: true,
		Init:     func() any { return keyState{} },
		Step: func(state, input, output any) (bool, any) {
			s := state.(keyState)
			switch in := input.(type) {
			case Request:
				a, _ := output.(Answer)
				if !a.Final() {
					return true, s
				}
				id := a.identity()
				if s.answer == "" {
					s.answer = id
					return true, s
				}
				return !r.Answers || s.answer == id, s
			case Apply:
				if s.applied && in.Token <= s.highest && r.Tokens {
					return false, s
				}
				s.applied = true
				s.highest = max(s.highest, in.Token)
				return true, s
			}
			return false, s
		},
		Describe: func(input, output any) string {
			switch in := input.(type) {
			case Request:
				a, _ := output.(Answer)
				if a.Status == 0 {
					return "request → no answer"
				}
				if a.ID == "" {
					return fmt.Sprintf("request → %d", a.Status)
				}
				return fmt.Sprintf("request → %d %s", a.Status, a.ID)
			case Apply:
				return fmt.Sprintf("upstream applies with token %d", in.Token)
			}
			return fmt.Sprintf("%T %v → %v", input, input, output)
		},
	}
}

// identity is what two final answers must share: the id, or the status
// when the answer has none.
func (a Answer) identity() string {
	if a.ID != "" {
		return a.ID
	}
	return fmt.Sprintf("status %d", a.Status)
}
