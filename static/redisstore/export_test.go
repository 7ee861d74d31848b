package redisstore

// CheckSource exposes the check script to tests.
func CheckSource() string { return checkSource }
