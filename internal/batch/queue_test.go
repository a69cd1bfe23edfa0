package batch

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

var errShut = errors.New("shut")

// record runs a queue whose batches are recorded; block holds the first
// batch until closed, so that jobs queue up behind it.
// The first batch signals entered, then waits for block: a test that
// waits for entered knows that batch is formed and that what it puts next
// goes to the following ones.
func record(t *testing.T, q *Queue[int], block chan struct{}) (batches *[][]int, stopped, entered chan struct{}) {
	t.Helper()
	var got [][]int
	stopped, entered = make(chan struct{}), make(chan struct{})
	first := true
	go q.Run(func(b []int) []int {
		if first {
			first = false
			close(entered)
			<-block
		}
		got = append(got, slices.Clone(b))
		return b
	}, func() { close(stopped) })
	return &got, stopped, entered
}

func put(t *testing.T, q *Queue[int], js ...int) {
	t.Helper()
	for _, j := range js {
		if err := q.Put(context.Background(), j); err != nil {
			t.Fatal(err)
		}
	}
}

// waitQueued waits until exactly n jobs wait in the queue's channel.
func waitQueued[J any](t *testing.T, q *Queue[J], n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); len(q.jobs) != n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs queued, want %d", len(q.jobs), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestBatchesTakeWhatQueuedAndDrainAtClose(t *testing.T) {
	q := New[int](3, 0, errShut)
	block := make(chan struct{})
	got, stopped, entered := record(t, q, block)
	put(t, q, 1)
	<-entered // 1 is taken: the writer is blocked in its batch
	put(t, q, 2, 3, 4, 5)
	waitQueued(t, q, 4)
	close(block)
	q.Close()
	select {
	case <-stopped:
	default:
		t.Fatal("Close returned before after ran")
	}
	// 2..5 queued behind the first batch: batches of at most 3, in order.
	want := [][]int{{1}, {2, 3, 4}, {5}}
	if !slices.EqualFunc(*got, want, slices.Equal) {
		t.Fatalf("batches %v, want %v", *got, want)
	}
	if err := q.Put(context.Background(), 6); err != errShut {
		t.Fatalf("Put after Close: %v, want %v", err, errShut)
	}
}

func TestSplitCarriesToTheNextBatch(t *testing.T) {
	q := New[int](10, 0, errShut)
	// Odd and even jobs never share a batch.
	q.Split = func(b []int, j int) bool { return len(b) > 0 && b[0]%2 != j%2 }
	block := make(chan struct{})
	got, _, entered := record(t, q, block)
	put(t, q, 0)
	<-entered
	put(t, q, 2, 4, 1, 3, 6)
	waitQueued(t, q, 5)
	close(block)
	q.Close()
	want := [][]int{{0}, {2, 4}, {1, 3}, {6}}
	if !slices.EqualFunc(*got, want, slices.Equal) {
		t.Fatalf("batches %v, want %v", *got, want)
	}
}

func TestTakeStopsAtTheFirstRefused(t *testing.T) {
	q := New[int](10, 0, errShut)
	put(t, q, 1, 2, 7, 3)
	extra := q.Take(nil, 10, func(j int) bool { return j < 5 })
	if !slices.Equal(extra, []int{1, 2}) {
		t.Fatalf("took %v, want [1 2]", extra)
	}
	// 7 is held for the next batch, ahead of 3.
	if j, ok := q.takeCarry(); !ok || j != 7 {
		t.Fatalf("carried %d %v, want 7", j, ok)
	}
	if got := q.Take(nil, 1, func(int) bool { return true }); !slices.Equal(got, []int{3}) {
		t.Fatalf("took %v, want [3]", got)
	}
}

func TestFillWaitsForItsDelay(t *testing.T) {
	// Batches of two: Fill returns once the job put meanwhile arrives,
	// long before its delay.
	q := New[int](2, time.Minute, errShut)
	go func() {
		time.Sleep(5 * time.Millisecond)
		q.Put(context.Background(), 2)
	}()
	// With a delay, Fill waits for the job put meanwhile; without, it
	// takes only what is queued.
	if got := q.Fill([]int{1}); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("Fill with delay: %v, want [1 2]", got)
	}
	q0 := New[int](5, 0, errShut)
	if got := q0.Fill([]int{1}); !slices.Equal(got, []int{1}) {
		t.Fatalf("Fill without delay: %v, want [1]", got)
	}
}

// A smaller batch after a bigger one holds none of the bigger one's jobs
// in the slots of the slice it does not use: jobs carry whole messages,
// which would stay in memory until a batch as big came along.
func TestBatchesLetGoOfTheirJobs(t *testing.T) {
	q := New[*int](4, 0, errShut)
	block := make(chan struct{})
	seen := make(chan []*int, 2)
	first := true
	stopped := make(chan struct{})
	entered := make(chan struct{})
	go q.Run(func(b []*int) []*int {
		if first {
			first = false
			close(entered)
			<-block
		}
		// The slots as the batch is handed over, the unused ones too.
		seen <- slices.Clone(b[:cap(b)])
		return b
	}, func() { close(stopped) })
	job := func() *int { return new(int) }
	if err := q.Put(context.Background(), job()); err != nil {
		t.Fatal(err)
	}
	<-entered
	for range 3 {
		if err := q.Put(context.Background(), job()); err != nil {
			t.Fatal(err)
		}
	}
	waitQueued(t, q, 3)
	close(block)
	<-seen // the first batch: one job
	big := <-seen
	if big[2] == nil {
		t.Fatalf("the second batch was not the three queued jobs: %v", big)
	}
	if err := q.Put(context.Background(), job()); err != nil {
		t.Fatal(err)
	}
	small := <-seen // the third batch: one job, in the same slice
	q.Close()
	<-stopped
	if small[0] == nil {
		t.Fatal("the third batch is empty")
	}
	for i, j := range small[1:] {
		if j != nil {
			t.Errorf("slot %d still holds a job of the batch before", i+1)
		}
	}
}
