package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxBodyPreview caps the stored body a key page shows.
const MaxBodyPreview = 64 << 10

// masked replaces what the console never shows.
const masked = "•••• (hidden)"

func (c *console) funcs() template.FuncMap {
	return template.FuncMap{
		"jobURL":  c.jobURL,
		"keyHref": c.keyURL,
		"time":    formatTime,
		"rfc3339": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"ago":     func(t time.Time) string { return ago(c.opts.Now(), t) },
		"deref": func(p any) any {
			switch v := p.(type) {
			case *string:
				if v == nil {
					return ""
				}
				return *v
			case *int64:
				if v == nil {
					return ""
				}
				return *v
			case *int:
				if v == nil {
					return ""
				}
				return *v
			case *time.Time:
				if v == nil {
					return ""
				}
				return formatTime(*v)
			case *bool:
				return v != nil && *v
			}
			return p
		},
	}
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

// ago is how long before now t was, rounded for a reader.
func ago(now, t time.Time) string {
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	// The two largest units, the smaller one left out when it is zero:
	// "45s", "1m", "1m 5s", "2h 10m", "3d 4h".
	units := []struct {
		size time.Duration
		name string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}}
	for i, u := range units {
		if d < u.size && u.size != time.Second {
			continue
		}
		big := d / u.size
		s := strconv.FormatInt(int64(big), 10) + u.name
		if i+1 < len(units) {
			next := units[i+1]
			if small := (d - big*u.size) / next.size; small > 0 {
				s += " " + strconv.FormatInt(int64(small), 10) + next.name
			}
		}
		return s + " ago"
	}
	return "0s ago"
}

// secretHeader reports whether a stored header's values are hidden: the
// credentials a request or answer may carry.
func secretHeader(name string) bool {
	n := strings.ToLower(name)
	switch n {
	case "authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key":
		return true
	}
	return strings.Contains(n, "secret") || strings.Contains(n, "signature") || strings.Contains(n, "password")
}

// secretField reports whether a JSON member's value is hidden in a
// payload or body the console shows.
func secretField(name string) bool {
	n := strings.ToLower(name)
	return strings.Contains(n, "secret") || strings.Contains(n, "password") || n == "api_key" || n == "apikey" ||
		n == "authorization" || strings.HasSuffix(n, "_sha256") || n == "api_key_hash"
}

// headerLine is one stored header as the key page lists it.
type headerLine struct{ Name, Value string }

func headerLines(h http.Header) []headerLine {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	var out []headerLine
	for _, k := range names {
		for _, v := range h[k] {
			if secretHeader(k) {
				v = masked
			}
			out = append(out, headerLine{k, v})
		}
	}
	return out
}

// bodyView is a stored body or a job's payload as a page shows it:
// pretty JSON when it is JSON, else text, capped at MaxBodyPreview.
// html/template escapes it wherever it is written.
type bodyView struct {
	Text    string
	JSON    bool
	Size    int
	Capped  bool
	Omitted bool
	Binary  bool
}

func viewBody(b []byte, omitted bool) bodyView {
	v := bodyView{Size: len(b), Omitted: omitted}
	if pretty, capped, ok := prettyJSON(b, MaxBodyPreview); ok {
		v.JSON, v.Capped, b = true, capped, pretty
	}
	if len(b) > MaxBodyPreview {
		b, v.Capped = b[:MaxBodyPreview], true
		for i := 0; i < utf8.UTFMax && len(b) > 0; i++ { // a rune cut in two
			if r, size := utf8.DecodeLastRune(b); r != utf8.RuneError || size != 1 {
				break
			}
			b = b[:len(b)-1]
		}
	}
	if !utf8.Valid(b) {
		v.Binary = true
		b = []byte(strings.ToValidUTF8(string(b), "\uFFFD"))
	}
	v.Text = string(b)
	return v
}

// maxIndent is the deepest level prettyJSON indents. Deeper values are
// written compact, on the line of the value that holds them: indenting
// every level would make a page grow with the square of the document's
// depth (a 12 KB body nested 6,000 deep would be a 72 MB page).
const maxIndent = 16

// indentation is the white space of the deepest indented line.
var indentation = strings.Repeat("  ", maxIndent)

// errFull stops prettyJSON once it has written its limit.
var errFull = errors.New("console: preview full")

// prettyJSON indents a JSON document, members in the order written, and
// hides the values of members whose names say they are secrets; ok is
// false for anything that is not one JSON value. It stops once it has
// written more than limit bytes, and says so with capped, so that its work
// is bounded by the limit, not by the document.
func prettyJSON(b []byte, limit int) (out []byte, capped, ok bool) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || !json.Valid(b) {
		return nil, false, false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	p := printer{dec: dec, limit: limit}
	switch err := p.value(0); {
	case errors.Is(err, errFull):
		return p.out.Bytes(), true, true
	case err != nil:
		return nil, false, false
	}
	return p.out.Bytes(), false, true
}

// printer writes the JSON values of dec to out, indented.
type printer struct {
	dec   *json.Decoder
	out   bytes.Buffer
	limit int
}

// newline starts a line at depth, or, past maxIndent, writes nothing: the
// value goes on where it is.
func (p *printer) newline(depth int) {
	if depth > maxIndent {
		return
	}
	p.out.WriteByte('\n')
	p.out.WriteString(indentation[:2*depth])
}

// value copies the next JSON value of dec to out, indented by depth.
func (p *printer) value(depth int) error {
	if p.out.Len() > p.limit {
		return errFull
	}
	tok, err := p.dec.Token()
	if err != nil {
		return err
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return writeScalar(&p.out, tok)
	}
	closing := byte(']')
	if delim == '{' {
		closing = '}'
	}
	p.out.WriteByte(byte(delim))
	n := 0
	for p.dec.More() {
		if n > 0 {
			p.out.WriteByte(',')
		}
		n++
		p.newline(depth + 1)
		if delim == '{' {
			name, err := p.dec.Token()
			if err != nil {
				return err
			}
			key, _ := name.(string)
			if err := writeScalar(&p.out, key); err != nil {
				return err
			}
			p.out.WriteString(": ")
			if secretField(key) {
				var skip json.RawMessage
				if err := p.dec.Decode(&skip); err != nil {
					return err
				}
				_ = writeScalar(&p.out, masked)
				continue
			}
		}
		if err := p.value(depth + 1); err != nil {
			return err
		}
	}
	if _, err := p.dec.Token(); err != nil { // the closing delimiter
		return err
	}
	if n > 0 {
		p.newline(depth)
	}
	p.out.WriteByte(closing)
	return nil
}

func writeScalar(out *bytes.Buffer, v any) error {
	if n, ok := v.(json.Number); ok {
		out.WriteString(n.String())
		return nil
	}
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false) // html/template escapes it where it is written
	if err := enc.Encode(v); err != nil {
		return err
	}
	out.Truncate(out.Len() - 1) // Encode's newline
	return nil
}

// pretty is v as indented JSON, secrets hidden, for a <pre>.
func pretty(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return viewBody(b, false).Text
}
