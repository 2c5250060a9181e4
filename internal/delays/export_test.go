package delays

// SetBeforePublish makes m call f with a task's ID before it stores the
// task's schedule.
func SetBeforePublish(m *Mover, f func(id string)) { m.beforePublish = f }
