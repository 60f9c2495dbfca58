package workers

// crashAt makes a handler die at stage (see the stage constants): it
// abandons its lease and returns without another write, as a killed
// process would.
func crashAt(stage string) Option {
	return func(o *options) { o.crash = func(s string) bool { return s == stage } }
}
