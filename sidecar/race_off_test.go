//go:build !race

package sidecar_test

// raceDetector: the race detector is on (sync.Pool then drops items at
// random, so allocation counts vary).
const raceDetector = false
