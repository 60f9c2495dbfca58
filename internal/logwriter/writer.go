// Package logwriter buffers the process log: lines are gathered in memory
// and written out together, at the latest every flush interval, instead
// of one write system call per line. On a gateway the access log writes a
// line per request, and that write (a system call, under the handler's
// mutex, often into a pipe whose reader must wake) cost more than the
// line's formatting; batching it costs a line at most the interval's
// delay.
//
// What it costs: lines not yet written are lost if the process is killed
// (SIGKILL, the kernel's OOM killer). Lines at warning level and above
// are written at once, with whatever was buffered before them (Handler),
// so an error never waits; Close writes the rest on a clean exit. The
// records that prove what happened to a request or a job are the
// database's, not the log's.
package logwriter

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// Writer is an io.Writer that buffers up to its size before writing to
// the underlying writer. It is safe for concurrent use.
type Writer struct {
	mu  sync.Mutex
	buf *bufio.Writer
	err error // the first write error, reported by Flush and Close
}

// New returns a Writer of size bytes on w. Run must be running for lines
// to be written within the flush interval.
func New(w io.Writer, size int) *Writer {
	return &Writer{buf: bufio.NewWriterSize(w, size)}
}

// Write buffers p, a whole line from the log's handler: when it does not
// fit in what is left of the buffer, what the buffer holds is written out
// first, so a line is never split over two writes. A line larger than the
// buffer is written through.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(p) > w.buf.Available() && w.buf.Buffered() > 0 {
		if err := w.buf.Flush(); err != nil {
			if w.err == nil {
				w.err = err
			}
			return 0, err
		}
	}
	n, err := w.buf.Write(p)
	if err != nil && w.err == nil {
		w.err = err
	}
	return n, err
}

// Flush writes what is buffered.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.buf.Flush(); err != nil && w.err == nil {
		w.err = err
	}
	return w.err
}

// Run flushes every interval until ctx ends, then once more. The process
// that made the Writer owns the goroutine running it.
func (w *Writer) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			_ = w.Flush()
			return
		case <-t.C:
			if w.buffered() > 0 {
				_ = w.Flush()
			}
		}
	}
}

func (w *Writer) buffered() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Buffered()
}

// Handler wraps h, which writes to w, so that a record at level urgent or
// above is written out at once, with what was buffered before it.
func Handler(h slog.Handler, w *Writer, urgent slog.Level) slog.Handler {
	return &handler{Handler: h, w: w, urgent: urgent}
}

type handler struct {
	slog.Handler
	w      *Writer
	urgent slog.Level
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Level >= h.urgent {
		if ferr := h.w.Flush(); err == nil {
			err = ferr
		}
	}
	return err
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &handler{Handler: h.Handler.WithAttrs(attrs), w: h.w, urgent: h.urgent}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{Handler: h.Handler.WithGroup(name), w: h.w, urgent: h.urgent}
}
