package delays

// SetBeforePublish makes m call f with a task's ID before it stores the
// task's schedule.
func SetBeforePublish(m *Mover, f func(id string)) { m.beforePublish = f }

// SetAfterPublish makes m call f with a task's ID once the server answered
// the publish of its schedule.
func SetAfterPublish(m *Mover, f func(id string)) { m.afterPublish = f }
