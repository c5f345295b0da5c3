package hedge

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Every latency in range (2µs to a minute) lands in a bucket whose midpoint is within 1.6 %
// of it.
func TestBucketRelativeError(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		d := time.Duration(math.Exp(r.Float64()*math.Log(float64(time.Minute)/float64(2*time.Microsecond)))) * 2 * time.Microsecond
		mid := bucketMid(bucketOf(d))
		if rel := math.Abs(float64(mid-d)) / float64(d); rel > 1.0/64 {
			t.Fatalf("%v → bucket midpoint %v: %.2f%% off", d, mid, 100*rel)
		}
	}
	for _, tt := range []struct {
		d    time.Duration
		want int
	}{{0, 0}, {-time.Second, 0}, {time.Nanosecond, 0}, {1 << 62, numBuckets - 1}} {
		if got := bucketOf(tt.d); got != tt.want {
			t.Errorf("bucketOf(%v) = %d, want %d", tt.d, got, tt.want)
		}
	}
}

func TestBucketsAreOrdered(t *testing.T) {
	for i := 1; i < numBuckets; i++ {
		if bucketMid(i) <= bucketMid(i-1) {
			t.Fatalf("bucket %d midpoint %v not above bucket %d's %v", i, bucketMid(i), i-1, bucketMid(i-1))
		}
		if bucketOf(bucketMid(i)) != i {
			t.Fatalf("bucket %d's midpoint %v falls in bucket %d", i, bucketMid(i), bucketOf(bucketMid(i)))
		}
	}
}

// The quantile of a histogram is within 2 % of the exact sample quantile.
func TestQuantileMatchesExact(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var h1, h2 histogram
	var all []time.Duration
	for i := range 20_000 {
		d := time.Duration(math.Exp(r.NormFloat64()*0.8) * float64(30*time.Millisecond))
		all = append(all, d)
		if i%2 == 0 {
			h1.add(d)
		} else {
			h2.add(d)
		}
	}
	slices.Sort(all)
	for _, q := range []float64{0.01, 0.5, 0.85, 0.95, 0.99, 0.999} {
		exact := all[int(math.Ceil(q*float64(len(all))))-1]
		got, ok := quantile(q, &h1, &h2)
		if rel := math.Abs(float64(got-exact)) / float64(exact); !ok || rel > 0.02 {
			t.Errorf("q%v = %v, exact %v (%.2f%% off)", q, got, exact, 100*rel)
		}
	}
	if _, ok := quantile(0.5, new(histogram)); ok {
		t.Error("quantile of an empty histogram reported ok")
	}
}

func TestBucketEdges(t *testing.T) {
	for i := 0; i < numBuckets; i++ {
		lo, hi, mid := bucketLo(i), bucketHi(i), bucketMid(i)
		if !(lo <= mid && mid < hi) || (i > 0 && bucketOf(lo) != i) || bucketOf(hi-1) != i {
			t.Fatalf("bucket %d: [%v, %v) with midpoint %v does not hold together", i, lo, hi, mid)
		}
		if i+1 < numBuckets && bucketLo(i+1) != hi {
			t.Fatalf("bucket %d ends at %v, bucket %d starts at %v", i, hi, i+1, bucketLo(i+1))
		}
	}
}
