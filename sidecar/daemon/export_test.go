package daemon

// RemovalDelay is removalDelay, for the reload tests.
const RemovalDelay = removalDelay
