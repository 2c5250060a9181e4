package framework

func (x *execSide) Prepare() {}

func (x *execSide) Call() {}

func fillTask() {}
