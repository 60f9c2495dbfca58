package browsertest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestSiteScreenshots takes the pictures of the site that its home page shows,
// docs/img/docs-home.png and docs/img/docs-guide.png: the built site
// (site/, `make docs`) served on loopback and seen by a headless Chromium.
// It runs only with IDEMGATE_DOCS_SCREENSHOTS=1 (`make docs-screenshots`,
// which also takes the console's pictures with the console's browser test).
func TestSiteScreenshots(t *testing.T) {
	if os.Getenv("IDEMGATE_DOCS_SCREENSHOTS") == "" {
		t.Skip("IDEMGATE_DOCS_SCREENSHOTS is not set: make docs-screenshots takes the site's pictures")
	}
	site := filepath.Join(root, "site")
	if _, err := os.Stat(filepath.Join(site, "index.html")); err != nil {
		t.Fatalf("the site is not built (make docs builds it into site/): %v", err)
	}
	var browser string
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			browser = p
			break
		}
	}
	if browser == "" {
		t.Fatal("chromium is not installed (apt-get install chromium)")
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(site)))
	defer srv.Close()

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(browser),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 860),
	)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(alloc)
	defer cancel()
	if err := chromedp.Do(ctx); err != nil { // starts the browser, without a timeout that would end it
		t.Fatalf("start chromium: %v", err)
	}
	for _, shot := range []struct{ page, file string }{
		{"/index.html", "docs-home.png"},
		{"/guide/jobs/scheduling.html", "docs-guide.png"},
	} {
		tctx, tcancel := context.WithTimeout(ctx, time.Minute)
		err := chromedp.Do(tctx, chromedp.Navigate(srv.URL+shot.page), chromedp.WaitVisible(chromedp.CSS("article")))
		var png []byte
		if err == nil {
			png, err = chromedp.Run(tctx, chromedp.CaptureScreenshot())
		}
		tcancel()
		if err != nil {
			t.Fatalf("%s: %v", shot.page, err)
		}
		path := filepath.Join(root, "docs", "img", shot.file)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %s, %d bytes", shot.page, path, len(png))
	}
}
