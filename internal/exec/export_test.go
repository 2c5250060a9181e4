package exec

// Len returns how many tasks are parked.
func (k *Parking[P]) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.timers)
}
