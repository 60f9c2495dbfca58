package faultproxy

import (
	"net"
	"sync"
	"time"
)

// Proxy forwards the TCP connections it accepts to one target. Its methods
// are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener

	mu     sync.Mutex
	thawed chan struct{} // closed while bytes flow; open while frozen
	delay  time.Duration // how long bytes from the target are held (delay.go)
	links  map[*link]struct{}
	closed bool

	wg sync.WaitGroup // the accept loop and every pump
}

// link is one accepted connection and its connection to the target.
type link struct {
	client net.Conn
	once   sync.Once
	cut    chan struct{} // closed when the link is cut
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.cut)
		_ = l.client.Close()
	})
}

// isCut reports whether the link has been cut.
func (l *link) isCut() bool {
	select {
	case <-l.cut:
		return true
	default:
		return false
	}
}

// New starts a proxy on a free port of 127.0.0.1 that forwards to target
// ("host:port"). The target is dialled once per accepted connection; when
// that fails, the accepted connection is closed.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	thawed := make(chan struct{})
	close(thawed)
	p := &Proxy{target: target, ln: ln, thawed: thawed, links: make(map[*link]struct{})}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the proxy's "host:port", where clients connect instead of the
// target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Freeze stops forwarding: no byte read from either side after Freeze
// returns reaches the other side until Thaw. Connections stay open, and
// each side may still have written bytes into its own socket buffers.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
		p.thawed = make(chan struct{})
	default: // frozen already
	}
}

// Thaw resumes forwarding, bytes held back first.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
	default:
		close(p.thawed)
	}
}

// CloseConns closes every connection the proxy holds, on both sides, and
// drops the bytes held back on them. The proxy keeps accepting new ones,
// frozen or not as it was.
func (p *Proxy) CloseConns() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
}

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.CloseConns()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.wg.Go(func() { p.serve(client) })
	}
}

// serve connects client to the target and forwards between them until
// either side closes or the link is cut.
func (p *Proxy) serve(client net.Conn) {
	// The link is known before the target is dialled, so that CloseConns
	// or Close cuts a connection the target has already accepted but this
	// goroutine has not yet paired.
	l := &link{client: client, cut: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.close()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		l.close()
		return
	}
	// Cutting the link closes the server side too.
	p.wg.Go(func() {
		<-l.cut
		_ = server.Close()
	})
	if l.isCut() {
		return
	}
	var back sync.WaitGroup
	back.Go(func() { p.pumpHeld(l, server, client) })
	p.pump(l, client, server)
	back.Wait()
}

// pump copies src to dst, waiting while the proxy is frozen before each
// read and before each write, until either side fails or the link is cut.
// Then it cuts the link, which ends the other direction too.
func (p *Proxy) pump(l *link, src, dst net.Conn) {
	defer l.close()
	buf := make([]byte, 32<<10)
	for p.wait(l) {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.wait(l) {
				return
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// wait returns true once the proxy is thawed, false if the link is cut
// first.
func (p *Proxy) wait(l *link) bool {
	p.mu.Lock()
	thawed := p.thawed
	p.mu.Unlock()
	select {
	case <-thawed:
		return true
	case <-l.cut:
		return false
	}
}
