package queue

// deque is a double-ended queue of waiters. Small and simple: queues are
// bounded (MaxSize), so removal by scanning is cheap enough.
type deque[P any] struct {
	items []*waiter[P]
}

func (d *deque[P]) pushBack(w *waiter[P]) { d.items = append(d.items, w) }

func (d *deque[P]) pushFront(w *waiter[P]) {
	d.items = append(d.items, nil)
	copy(d.items[1:], d.items)
	d.items[0] = w
}

func (d *deque[P]) front() *waiter[P] {
	if len(d.items) == 0 {
		return nil
	}
	return d.items[0]
}

func (d *deque[P]) popFront() *waiter[P] {
	if len(d.items) == 0 {
		return nil
	}
	w := d.items[0]
	d.items[0] = nil
	d.items = d.items[1:]
	return w
}

func (d *deque[P]) popBack() *waiter[P] {
	n := len(d.items)
	if n == 0 {
		return nil
	}
	w := d.items[n-1]
	d.items[n-1] = nil
	d.items = d.items[:n-1]
	return w
}

// remove deletes w, reporting whether it was there.
func (d *deque[P]) remove(w *waiter[P]) bool {
	for i, x := range d.items {
		if x == w {
			copy(d.items[i:], d.items[i+1:])
			d.items[len(d.items)-1] = nil
			d.items = d.items[:len(d.items)-1]
			return true
		}
	}
	return false
}
