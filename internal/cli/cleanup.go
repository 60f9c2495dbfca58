package cli

// closers is a command's one cleanup path: whatever the command opens is
// pushed here as it is opened, and close releases it all, last opened
// first, so nothing is closed while something opened after it still uses
// it.
type closers struct {
	fns []func()
}

// push adds f, to run on close.
func (c *closers) push(f func()) { c.fns = append(c.fns, f) }

// close runs every pushed function in reverse order. What it ran is
// forgotten: a second close releases nothing twice.
func (c *closers) close() {
	fns := c.fns
	c.fns = nil
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}
