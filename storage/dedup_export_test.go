package storage

// SetDedupBatchForTest sets how many entries each copy transaction of
// migration 0010 takes.
func SetDedupBatchForTest(n int) { dedupBatch = n }
