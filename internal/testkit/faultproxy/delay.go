package faultproxy

import (
	"net"
	"sync"
	"time"
)

// The delay mode stands for a replica that lags: put the proxy on a
// replication stream (the replica or standby connects to the proxy, the
// proxy to the primary) and the bytes the primary sends are held for the
// delay before the replica sees them. Killing the primary and calling
// DropHeld then loses exactly the last delay's worth of the stream, as a
// host crash does with what it had not sent yet: the lag is produced, not
// hoped for.

// heldChunks bounds the chunks held per connection; a reader that gets
// this far ahead of the delay waits, as a full socket buffer would make it.
const heldChunks = 4096

// SetDelay holds every byte read from the target for d before it is
// written to the client; 0 forwards at once. It applies to bytes read from
// then on, on every connection. Bytes from the client are never delayed:
// a lag in one direction is what a replica behind its primary is.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = max(d, 0)
}

// DropHeld is the crash of the target's host: every connection is cut and
// the bytes held on them (by the delay or by a freeze) are dropped, never
// written. New connections are accepted as before. To lose the held bytes
// and nothing else, Freeze first, kill the target, then DropHeld: no byte
// moves in between.
func (p *Proxy) DropHeld() { p.CloseConns() }

type heldChunk struct {
	b   []byte
	due time.Time
}

// pumpHeld copies src (the target) to dst (the client) through a queue of
// chunks, each written once its delay has passed and the proxy is thawed;
// a chunk still queued when the link is cut is dropped.
func (p *Proxy) pumpHeld(l *link, src, dst net.Conn) {
	defer l.close()
	queue := make(chan heldChunk, heldChunks)
	var writer sync.WaitGroup
	writer.Go(func() {
		defer l.close()
		timer := time.NewTimer(0)
		defer timer.Stop()
		for {
			var c heldChunk
			select {
			case next, ok := <-queue:
				if !ok {
					return // the target closed: all it sent is written
				}
				c = next
			case <-l.cut:
				return
			}
			if wait := time.Until(c.due); wait > 0 {
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-l.cut:
					return
				}
			}
			if !p.wait(l) || l.isCut() {
				return
			}
			if _, err := dst.Write(c.b); err != nil {
				return
			}
		}
	})
	defer writer.Wait()
	defer close(queue)
	buf := make([]byte, 32<<10)
	for p.wait(l) {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			due := time.Now().Add(p.delay)
			p.mu.Unlock()
			select {
			case queue <- heldChunk{b: append([]byte(nil), buf[:n]...), due: due}:
			case <-l.cut:
				return
			}
		}
		if err != nil {
			return
		}
	}
}
