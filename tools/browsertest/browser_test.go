package browsertest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// The browser: a headless Chromium of the test's own (a fresh profile,
// nothing fetched in the background), tabs that send the admin token as
// HTTP Basic credentials, and the log of every request a console tab made.

// chromium is the path of Debian's chromium. When it is missing the test
// fails if TEST_TOPOLOGY is set, because `make test` installed it, and is
// skipped otherwise.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("TEST_TOPOLOGY") != "" {
		t.Fatal("chromium is not installed, though TEST_TOPOLOGY is set (deploy/local/services.sh --topology installs it)")
	}
	t.Skip("chromium is not installed: skipping the console's browser test (apt-get install chromium, or make test, which installs it and sets TEST_TOPOLOGY=1)")
	return ""
}

// browser is one Chromium process.
type browser struct {
	t      *testing.T
	ctx    context.Context // the browser's first tab; new tabs derive from it
	origin string          // the admin listener the console is served on
	auth   string          // the Authorization header the tabs send
	shots  string          // the directory of screenshots, "" when none is asked

	mu       sync.Mutex
	requests []string // every URL a console tab asked for
}

func newBrowser(t *testing.T, origin string) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// The first run starts the browser, with no timeout: a timeout on it
	// would end the browser.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	b := &browser{
		t: t, ctx: ctx, origin: origin,
		auth: "Basic " + base64.StdEncoding.EncodeToString([]byte("operator:"+adminToken)),
	}
	if os.Getenv("IDEMGATE_SCREENSHOTS") != "" {
		b.shots = docsDir(t)
	}
	return b
}

// tab is one browser tab.
type tab struct {
	b   *browser
	ctx context.Context

	mu        sync.Mutex
	navigated int            // main-frame navigations
	statuses  map[string]int // the last status of each URL's answer
}

// newTab opens a tab that sends the admin credentials with every request.
// A console tab's requests go into the browser's log; other tabs (a page
// of another origin) keep theirs.
func (b *browser) newTab(console bool) *tab {
	b.t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx)
	b.t.Cleanup(cancel)
	tb := &tab{b: b, ctx: ctx, statuses: map[string]int{}}
	if err := chromedp.Do(ctx); err != nil { // opens the tab
		b.t.Fatalf("open a tab: %v", err)
	}
	err := chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			if console {
				b.mu.Lock()
				b.requests = append(b.requests, ev.Request.URL)
				b.mu.Unlock()
			}
		case *network.EventResponseReceived:
			tb.mu.Lock()
			tb.statuses[ev.Response.URL] = int(ev.Response.Status)
			tb.mu.Unlock()
		case *page.EventFrameNavigated:
			if ev.Frame.ParentID == "" {
				tb.mu.Lock()
				tb.navigated++
				tb.mu.Unlock()
			}
		}
	})
	if err != nil {
		b.t.Fatal(err)
	}
	_, err = chromedp.Call(ctx, network.Enable, network.EnableParams{})
	if err == nil {
		_, err = chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
			Headers: network.Headers{"Authorization": b.auth},
		})
	}
	if err != nil {
		b.t.Fatalf("tab network: %v", err)
	}
	return tb
}

// navigations is how many times the tab's main frame has navigated.
func (tb *tab) navigations() int {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return tb.navigated
}

// status is the status of the last answer for u the tab received.
func (tb *tab) status(u string) (int, bool) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	s, ok := tb.statuses[u]
	return s, ok
}

// open navigates to the console page at path (under the admin origin)
// and waits until its document has loaded.
func (tb *tab) open(t testing.TB, path string) {
	t.Helper()
	tb.openURL(t, tb.b.origin+path)
}

// openURL navigates to u and waits until its document has loaded.
func (tb *tab) openURL(t testing.TB, u string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(u)); err != nil {
		t.Fatalf("open %s: %v", u, err)
	}
}

// click clicks the element sel once it is visible.
func (tb *tab) click(t testing.TB, sel string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible)); err != nil {
		t.Fatalf("click %s on %s: %v\n%s", sel, tb.location(), err, tb.bodyText())
	}
}

// typeInto types text into the input sel, as a keyboard does.
func (tb *tab) typeInto(t testing.TB, sel, text string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(sel), text, chromedp.NodeVisible)); err != nil {
		t.Fatalf("type into %s: %v", sel, err)
	}
}

// eval evaluates a JavaScript expression and decodes its JSON value into
// T; a page that is navigating makes it fail, so callers retry.
func eval[T any](tb *tab, expr string) (T, error) {
	ctx, cancel := context.WithTimeout(tb.ctx, 5*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr))
}

// waitFor evaluates the JavaScript predicate until it is true, failing
// after d with what the page shows.
func (tb *tab) waitFor(t testing.TB, what string, d time.Duration, predicate string) {
	t.Helper()
	deadline := time.Now().Add(d)
	var last error
	for {
		ok, err := eval[bool](tb, "(() => { try { return Boolean("+predicate+") } catch (e) { return false } })()")
		if err == nil && ok {
			return
		}
		last = err
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s (at %s, last error %v); the page shows:\n%s", what, d, tb.location(), last, tb.bodyText())
		}
		select {
		case <-tb.ctx.Done():
			t.Fatalf("%s: %v", what, tb.ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// text is the trimmed text of the first element matching sel, or "".
func (tb *tab) text(t testing.TB, sel string) string {
	t.Helper()
	s, err := eval[string](tb, fmt.Sprintf(`(() => { const e = document.querySelector(%s); return e ? e.textContent.trim() : "" })()`, jsString(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// items reads the data attributes of every element matching sel, in
// document order.
func (tb *tab) items(t testing.TB, sel string) []map[string]string {
	t.Helper()
	out, err := eval[[]map[string]string](tb, fmt.Sprintf(`Array.from(document.querySelectorAll(%s)).map(e => Object.assign({}, e.dataset))`, jsString(sel)))
	if err != nil {
		t.Fatalf("items %s: %v", sel, err)
	}
	return out
}

// location is the tab's URL, for failure messages.
func (tb *tab) location() string {
	s, err := eval[string](tb, "location.href")
	if err != nil {
		return "?"
	}
	return s
}

// bodyText is the start of what the page shows, for failure messages.
func (tb *tab) bodyText() string {
	s, err := eval[string](tb, `document.body ? document.body.innerText : ""`)
	if err != nil {
		return fmt.Sprintf("(unreadable: %v)", err)
	}
	return tail(s, 3000)
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// prefersColorScheme makes the tab's pages see the system setting
// "light" or "dark", and returns the page's background brightness (the
// mean of its red, green and blue, 0 to 255).
func (tb *tab) prefersColorScheme(t testing.TB, scheme string) float64 {
	t.Helper()
	_, err := chromedp.Call(tb.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}},
	})
	if err != nil {
		t.Fatalf("emulate prefers-color-scheme %s: %v", scheme, err)
	}
	v, err := eval[float64](tb, `(() => { const c = getComputedStyle(document.body).backgroundColor.match(/[\d.]+/g).map(Number); return (c[0] + c[1] + c[2]) / 3 })()`)
	if err != nil {
		t.Fatalf("the page's background: %v", err)
	}
	return v
}

// screenshot saves the whole page as docs/NAME.png when screenshots are
// asked for.
func (tb *tab) screenshot(t testing.TB, name string) {
	t.Helper()
	if tb.b.shots == "" {
		return
	}
	ctx, cancel := context.WithTimeout(tb.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(tb.b.shots, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// docsDir is the repository's docs/ directory: the screenshots are
// committed there and the docs show them.
func docsDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join(root, "docs"))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// foreignRequests are the URLs the console tabs asked for that are neither
// on the admin origin nor data: URLs.
func (b *browser) foreignRequests() (foreign []string, total int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, raw := range b.requests {
		u, err := url.Parse(raw)
		switch {
		case err == nil && u.Scheme == "data":
		case err == nil && u.Scheme+"://"+u.Host == b.origin:
		default:
			foreign = append(foreign, raw)
		}
	}
	return foreign, len(b.requests)
}
