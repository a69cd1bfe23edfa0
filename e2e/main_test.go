// Package e2e drives the browser UI against the real server binary in
// headless Chromium. TestMain builds the binary once and starts one browser;
// every test starts its own server on a free port with a fresh database, and
// every simulated person gets a browser context of their own (separate
// storage, like separate browsers).
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

var (
	serverBin string
	// browserCtx holds the one Chromium process all tests share.
	browserCtx context.Context
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	chromium := findChromium()
	if chromium == "" {
		if os.Getenv("CI") != "" {
			fmt.Fprintln(os.Stderr, "e2e: Chromium not found (install the chromium package)")
			return 1
		}
		fmt.Println("e2e: skipped, Chromium not found (apt-get install chromium)")
		return 0
	}

	dir, err := os.MkdirTemp("", "imserver-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer removeAll(dir)

	serverBin = filepath.Join(dir, "imserver")
	build := exec.Command("go", "build", "-o", serverBin, ".")
	build.Dir = ".."
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building the server:", err)
		return 1
	}

	profile := filepath.Join(dir, "profile")
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.Flag("disable-backgrounding-occluded-windows", true),
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.WindowSize(1280, 800),
		chromedp.UserDataDir(profile),
	)
	defer cancelAlloc()
	ctx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	start, cancelStart := context.WithTimeout(ctx, time.Minute)
	defer cancelStart()
	// Start the browser with ctx (no timeout) bound to it, then check it
	// answers within the minute.
	if err := chromedp.Do(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: starting Chromium:", err)
		return 1
	}
	if _, err := chromedp.Run(start, chromedp.Evaluate[int](`1`)); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: Chromium does not answer:", err)
		return 1
	}
	browserCtx = ctx
	return m.Run()
}

func findChromium() string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// removeAll retries: Chromium's helpers can still write in the profile for a
// moment after the browser exits.
func removeAll(dir string) {
	for range 50 {
		if err := os.RemoveAll(dir); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
