package fleet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/static"
)

// The wire format of a Batch: a version byte, the node, the time sent, the
// usages, each with its key, its policy and its numbers, integers as
// varints. Decode refuses what Encode would not write.
const (
	wireVersion = 1
	// MaxKeyLen bounds a key on the wire.
	MaxKeyLen = 4096
	// MaxNodeLen bounds a node name.
	MaxNodeLen = 256
)

// Encode appends b's wire form to dst.
func Encode(dst []byte, b *Batch) []byte {
	dst = append(dst, wireVersion)
	dst = appendString(dst, b.Node)
	dst = binary.AppendVarint(dst, b.Sent.UnixNano())
	flags := byte(0)
	if b.Gone {
		flags = 1
	}
	dst = append(dst, flags)
	dst = binary.AppendUvarint(dst, uint64(len(b.Usages)))
	for i := range b.Usages {
		dst = AppendUsage(dst, &b.Usages[i])
	}
	return dst
}

// AppendUsage appends one usage's wire form to dst.
func AppendUsage(dst []byte, u *static.Usage) []byte {
	p := u.Policy
	dst = appendString(dst, u.Key)
	dst = append(dst, byte(p.Algorithm))
	var f byte
	if p.NoDelay {
		f |= 1
	}
	if p.CountBlocked {
		f |= 2
	}
	dst = append(dst, f)
	for _, v := range [...]int64{p.Limit, int64(p.Window), p.Burst, int64(p.Warmup), int64(p.MinInterval), int64(p.Timeout)} {
		dst = binary.AppendUvarint(dst, uint64(v))
	}
	dst = binary.AppendVarint(dst, u.At)
	dst = binary.AppendVarint(dst, u.Cost)
	return binary.AppendVarint(dst, u.InFlight)
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// Decoder decodes batches, sharing one *static.Policy among the usages of
// equal policies. It is safe for concurrent use.
type Decoder struct {
	mu       sync.Mutex
	policies map[static.Policy]*static.Policy
}

// maxInterned bounds the policies a Decoder keeps.
const maxInterned = 4096

var errShort = errors.New("fleet: batch truncated")

// Decode reads one batch from its wire form. A malformed batch, a policy
// that does not validate or a bound passed is an error; nothing of the
// batch is then used.
func (d *Decoder) Decode(buf []byte) (Batch, error) {
	r := reader{buf: buf}
	if v := r.byte(); r.err == nil && v != wireVersion {
		return Batch{}, fmt.Errorf("fleet: wire version %d, want %d", v, wireVersion)
	}
	var b Batch
	b.Node = r.string(MaxNodeLen)
	b.Sent = time.Unix(0, r.varint())
	b.Gone = r.byte()&1 != 0
	n := r.uvarint()
	if r.err != nil {
		return Batch{}, r.err
	}
	// Each usage takes at least 12 bytes: a count beyond that is a lie.
	if n > uint64(len(r.buf)/12+1) {
		return Batch{}, fmt.Errorf("fleet: batch claims %d usages in %d bytes", n, len(r.buf))
	}
	b.Usages = make([]static.Usage, 0, n)
	for range n {
		var u static.Usage
		u.Key = r.string(MaxKeyLen)
		var p static.Policy
		p.Algorithm = static.Algorithm(r.byte())
		f := r.byte()
		p.NoDelay, p.CountBlocked = f&1 != 0, f&2 != 0
		p.Limit = r.int()
		p.Window = time.Duration(r.int())
		p.Burst = r.int()
		p.Warmup = time.Duration(r.int())
		p.MinInterval = time.Duration(r.int())
		p.Timeout = time.Duration(r.int())
		u.At, u.Cost, u.InFlight = r.varint(), r.varint(), r.varint()
		if r.err != nil {
			return Batch{}, r.err
		}
		if err := p.Validate(); err != nil {
			return Batch{}, fmt.Errorf("fleet: key %q: policy: %w", u.Key, err)
		}
		if u.InFlight < 0 || u.InFlight > static.MaxLimit || u.Cost < -static.MaxLimit || u.Cost > static.MaxLimit {
			return Batch{}, fmt.Errorf("fleet: key %q: usage out of range", u.Key)
		}
		u.Policy = d.intern(p)
		b.Usages = append(b.Usages, u)
	}
	if len(r.buf) != 0 {
		return Batch{}, fmt.Errorf("fleet: %d bytes after the batch", len(r.buf))
	}
	return b, nil
}

func (d *Decoder) intern(p static.Policy) *static.Policy {
	d.mu.Lock()
	defer d.mu.Unlock()
	if q, ok := d.policies[p]; ok {
		return q
	}
	if d.policies == nil || len(d.policies) >= maxInterned {
		d.policies = make(map[static.Policy]*static.Policy)
	}
	q := &p
	d.policies[p] = q
	return q
}

// reader reads the wire format, keeping the first error.
type reader struct {
	buf []byte
	err error
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.buf) == 0 {
		r.err = errShort
		return 0
	}
	b := r.buf[0]
	r.buf = r.buf[1:]
	return b
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.buf)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.buf = r.buf[n:]
	return v
}

// int is a non-negative integer within static.MaxWindow (the largest the
// policy's fields hold).
func (r *reader) int() int64 {
	v := r.uvarint()
	if r.err == nil && v > uint64(static.MaxWindow) {
		r.err = fmt.Errorf("fleet: value %d out of range", v)
	}
	return int64(v)
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.buf)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.buf = r.buf[n:]
	return v
}

func (r *reader) string(limit int) string {
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if n > uint64(limit) || n > uint64(len(r.buf)) {
		r.err = fmt.Errorf("fleet: string of %d bytes (at most %d, %d left)", n, limit, len(r.buf))
		return ""
	}
	s := string(r.buf[:n])
	r.buf = r.buf[n:]
	return s
}
