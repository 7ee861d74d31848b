//go:build race

package daemon_test

// raceDetector: the race detector is on (sync.Pool then drops items at
// random, so allocation counts vary).
const raceDetector = true
