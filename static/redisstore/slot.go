package redisstore

import "strings"

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of the
// key's hash tag (the part between the first "{" and the next "}", when not
// empty) or of the whole key, modulo 16384. go-redis computes the same in an
// internal package that cannot be imported; grouping limits by slot before
// building the pipeline needs it here.
func Slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key) % 16384
}

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
