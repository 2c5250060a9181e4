package attempt

func (e *Executor[P]) Run() {}

func (e *Executor[P]) call() {}
