package deadletter

// Len returns how many partitions have a core.
func (d *Partitions) Len() int { return len(d.cores.Load().list) }
