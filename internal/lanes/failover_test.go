package lanes

import "testing"

func TestNewGateHoldsNothingUntilAcquired(t *testing.T) {
	t.Parallel()
	s := &script{t: t, g: New[string](Config{})}
	s.run(
		step{"recv a 1", "~a1"},
		step{"check 0 0", ""},
		step{"recheck", ""},
	)
	s.empty()
}

// The check counts only the held deliveries whose DSeq the consumer-info
// reply had made: here the reply (delivered 6) saw a1 and a2 but not b1.
func TestCheckCountsWhatTheReplyHadDelivered(t *testing.T) {
	t.Parallel()
	s := &script{t: t, g: New[string](Config{})}
	s.run(
		step{"acquired", ""},
		step{"recv a 2 @6", ""},
		step{"recv a 1 @5", ""},
		step{"recv b 3 @7", ""},
		step{"recheck", ""},
		step{"check 3 6", ""}, // one delivery pending that is not held here
		step{"check 1 6", ""}, // a held delivery is not pending yet
		step{"check 2 6", "a1@5 b3@7 open"},
	)
}

func TestCheckCountsRunningAndAwaited(t *testing.T) {
	t.Parallel()
	s := opened(t, Config{Ordered: true})
	s.run(
		step{"recv a 1 @1", "a1@1"},
		step{"recv b 2 @2", "b2@2"},
		step{"recv b 3 @3", ""},
		step{"nak b 2", ""},
		step{"acquired", ""}, // the pin changed without a lost answer
		step{"recv c 4 @4", ""},
		step{"done a 1", ""},
		step{"check 4 4", ""},
		step{"check 3 3", ""},
		step{"check 2 3", "c4@4 open"}, // awaited b2 and queued b3; c4 came after
		step{"forget b 2", "b3@3"},
	)
}

func TestLostHandsBackTheQueuedAndForgetsTheAwaited(t *testing.T) {
	t.Parallel()
	s := opened(t, Config{Ordered: true})
	s.run(
		step{"recv a 1 @1", "a1@1"},
		step{"recv a 3 @2", ""},
		step{"recv b 2 @3", "b2@3"},
		step{"nak b 2", ""},
		step{"recv b 4 @4", ""},
		step{"recv c 5 @5", "c5@5"},
		step{"done c 5", ""},
		step{"lost", "a3@2 b4@4"},
	)
	s.keys("a:0/1/0")
	s.run(
		step{"recv a 6 @6", "~a6@6"}, // the lane is another worker's
		step{"recv b 2 @7", "~b2@7"},
		step{"lost", ""},
		step{"check 1 7", ""},
		step{"nak a 1", ""}, // its next delivery goes to the owner: not awaited
	)
	s.empty()
}

// A task still running when the pin went away keeps its key busy and
// counts in the gate's next check.
func TestRunningTasksOutliveLostAndAcquired(t *testing.T) {
	t.Parallel()
	s := opened(t, Config{Ordered: true})
	s.run(
		step{"recv a 1 @1", "a1@1"},
		step{"recv b 2 @2", "b2@2"},
		step{"lost", ""},
		step{"acquired", ""},
		step{"recv a 3 @3", ""},
		step{"recv b 4 @4", ""},
		step{"done b 2", ""}, // closed: nothing starts
		step{"check 3 4", "b4@4 open"},
		step{"done a 1", "a3@3"},
		step{"done a 3", ""},
		step{"done b 4", ""},
	)
	s.empty()
}

func TestCapHoldsAcrossLost(t *testing.T) {
	t.Parallel()
	s := opened(t, Config{Limit: func(string) int { return 2 }})
	s.run(
		step{"recv a 1 @1", "a1@1"},
		step{"recv a 2 @2", "a2@2"},
		step{"lost", ""},
		step{"acquired", ""},
		step{"recv a 3 @3", ""},
		step{"recv a 4 @4", ""},
		step{"check 4 4", "open"},
		step{"done a 2", "a3@3"},
	)
	s.keys("a:1/2/0")
}
