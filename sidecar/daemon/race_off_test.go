//go:build !race

package daemon_test

// raceDetector: the race detector is off.
const raceDetector = false
