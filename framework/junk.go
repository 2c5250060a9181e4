package framework

// MaxJunkSubjects bounds [QueueStats].JunkSubjects.
const MaxJunkSubjects = 100
