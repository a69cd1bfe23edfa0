package server_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/imserver/imserver/chat"
	"github.com/imserver/imserver/server"
	"github.com/imserver/imserver/storage"
)

// benchFileServer starts a server (as newServer does, for a benchmark)
// and returns its URL and a user's token.
func benchFileServer(b *testing.B) (string, string) {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	path := filepath.Join(b.TempDir(), "bench.db")
	metrics := server.NewMetrics()
	hub := server.NewHub(log, metrics)
	var svc *chat.Service
	db, err := storage.Open(ctx, path, storage.Options{OnCommit: func(m []chat.Message) { svc.Committed(m) }})
	if err != nil {
		b.Fatal(err)
	}
	svc = chat.NewService(db, hub, chat.Config{RegistrationOpen: true}, log)
	files, err := server.OpenFiles(ctx, db, server.FilesOptions{Dir: path + "-files", MaxFileBytes: 64 << 20}, metrics, log)
	if err != nil {
		b.Fatal(err)
	}
	srv := server.New(server.Config{Files: files}, svc, hub, metrics, nil, nil, log)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(l)
	b.Cleanup(func() {
		srv.Shutdown(ctx)
		svc.Close()
		files.Close()
		db.Close()
	})
	base := "http://" + l.Addr().String()
	res, err := http.Post(base+"/api/v1/auth/register", "application/json", strings.NewReader(`{"username":"bench","password":"password-bench"}`))
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	var reg struct {
		Token string `json:"token"`
	}
	json.NewDecoder(res.Body).Decode(&reg)
	return base, reg.Token
}

// countedReader yields size bytes of a pattern that starts with n, so
// that every upload is a new content (no shortcut for known bytes).
type countedReader struct {
	n, left int64
	first   bool
}

func (r *countedReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), r.left, int64(len(benchPattern)))]
	copy(p, benchPattern)
	if !r.first && len(p) >= 8 {
		binary.LittleEndian.PutUint64(p, uint64(r.n))
		r.first = true
	}
	r.left -= int64(len(p))
	return len(p), nil
}

const benchFileSize = 20 << 20

var benchPattern = func() []byte {
	p := make([]byte, 1<<20)
	for i := range p {
		p[i] = byte(i*7 + i>>8)
	}
	return p
}()

// cpuTime is the process's CPU time (user + system), client included: on
// a shared machine the wall time says more about the neighbours.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchUpload(b *testing.B, base, token string, n int64) string {
	req, _ := http.NewRequest("POST", base+"/api/v1/files?name=big.bin", &countedReader{n: n, left: benchFileSize})
	req.ContentLength = benchFileSize
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/octet-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	var out struct {
		File struct {
			ID string `json:"id"`
		} `json:"file"`
	}
	if res.StatusCode != http.StatusCreated || json.NewDecoder(res.Body).Decode(&out) != nil {
		b.Fatalf("upload: %d", res.StatusCode)
	}
	return out.File.ID
}

// heapWatch reports the largest HeapInuse growth over the benchmark.
func heapWatch(b *testing.B) func() {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	start := ms.HeapInuse
	return func() {
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(int64(ms.HeapInuse)-int64(start))/(1<<20), "heap-growth-MiB")
	}
}

// BenchmarkFileUpload20MiB: a 20 MiB upload over loopback, streamed to
// disk, hashed and fsynced (client and server in this process).
func BenchmarkFileUpload20MiB(b *testing.B) {
	base, token := benchFileServer(b)
	b.SetBytes(benchFileSize)
	done := heapWatch(b)
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		benchUpload(b, base, token, int64(i))
	}
	b.StopTimer()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	done()
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/(1<<10), "alloc-KiB/upload")
	b.ReportMetric(float64(benchFileSize)/(1<<20)/((cpuTime()-cpu0).Seconds()/float64(b.N)), "MiB/cpu-s")
}

// BenchmarkFileDownload20MiB: a 20 MiB file served with http.ServeContent
// over loopback.
func BenchmarkFileDownload20MiB(b *testing.B) {
	base, token := benchFileServer(b)
	id := benchUpload(b, base, token, 0)
	b.SetBytes(benchFileSize)
	done := heapWatch(b)
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req, _ := http.NewRequest("GET", base+"/api/v1/files/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if err != nil || n != benchFileSize {
			b.Fatalf("download: %d bytes, %v", n, err)
		}
	}
	b.StopTimer()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	done()
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/(1<<10), "alloc-KiB/download")
	b.ReportMetric(float64(benchFileSize)/(1<<20)/((cpuTime()-cpu0).Seconds()/float64(b.N)), "MiB/cpu-s")
}
