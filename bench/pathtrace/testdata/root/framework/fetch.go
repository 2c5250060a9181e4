package framework

func (w *Worker) startDirect() {}

func (w *Worker) execute() {}
