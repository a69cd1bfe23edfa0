package files

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/jpeg"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// phoneJPEG encodes a 4000×3000 photo-like image: smooth gradients with
// noise, so that it compresses (and decodes) like a camera's.
func phoneJPEG(tb testing.TB, seed uint64) []byte {
	tb.Helper()
	const w, h = 4000, 3000
	img := image.NewYCbCr(image.Rect(0, 0, w, h), image.YCbCrSubsampleRatio420)
	r := rand.New(rand.NewPCG(seed, seed))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.Y[y*img.YStride+x] = uint8((x*255/w+y*255/h)/2 + r.IntN(24))
		}
	}
	for y := 0; y < h/2; y++ {
		for x := 0; x < w/2; x++ {
			img.Cb[y*img.CStride+x] = uint8(64 + x*128/(w/2))
			img.Cr[y*img.CStride+x] = uint8(192 - y*128/(h/2))
		}
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 85}); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

// BenchmarkThumbnails100Photos makes thumbnails of 100 phone-sized JPEGs
// (4000×3000) through the Thumbnailer's pool of 2, as 100 concurrent
// first requests would. The budget is 10 s per 100 on 2 cores with the
// heap bounded by the pool.
func BenchmarkThumbnails100Photos(b *testing.B) {
	base := [][]byte{phoneJPEG(b, 1), phoneJPEG(b, 2)}
	s, err := Open(b.TempDir(), 0, func(context.Context, string) (int, error) { return 1, nil })
	if err != nil {
		b.Fatal(err)
	}
	th := NewThumbnailer(s, 2, 50_000_000)
	var peak uint64
	var cpu time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		// 100 distinct contents: bytes after a JPEG's end are ignored by
		// decoders but change the hash.
		hashes := make([]string, 100)
		for j := range hashes {
			body := append(append([]byte{}, base[j%2]...), fmt.Sprintf("%d-%d", i, j)...)
			u, err := s.Write(bytes.NewReader(body), 1<<30)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Keep(context.Background(), u, func() error { return nil }); err != nil {
				b.Fatal(err)
			}
			hashes[j] = u.SHA256
		}
		runtime.GC()
		b.StartTimer()
		cpu0 := cpuTime()
		stop := make(chan struct{})
		var watch sync.WaitGroup
		watch.Add(1)
		go func() {
			defer watch.Done()
			var ms runtime.MemStats
			for {
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapInuse)
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
		var wg sync.WaitGroup
		for _, h := range hashes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, _, err := th.Thumb(context.Background(), h); err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
		cpu += cpuTime() - cpu0
		close(stop)
		watch.Wait()
		b.StopTimer()
		for _, h := range hashes {
			os.Remove(s.Path(h) + ".thumb.jpg")
			os.Remove(s.Path(h))
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	// CPU seconds per 100 (user + system): on a shared machine the wall
	// time says more about the neighbours; divided by 2 this is the wall
	// time on 2 free cores.
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/100")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
