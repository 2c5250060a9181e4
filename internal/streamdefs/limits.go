package streamdefs

import (
	"errors"
	"fmt"
)

// MaxTaskTypeLen is the longest accepted task type, in bytes
// (streams.ValidateTaskType).
const MaxTaskTypeLen = 128

// OrderedSlots is the number of slot subjects per ordered task type. The
// partition count of an ordered type must divide it.
const OrderedSlots = 256

// MaxPartitions bounds the task partitions of a deployment
// (streams.Config.Partitions).
const MaxPartitions = 64

// ErrPartitions reports an invalid partition count, or a change of the
// count that streams.Ensure does not make (streams.ErrPartitions).
var ErrPartitions = errors.New("streams: task partitions")

// ValidatePartitionCount checks a task partition count: 1 to
// [MaxPartitions].
func ValidatePartitionCount(count int) error {
	if count < 1 || count > MaxPartitions {
		return fmt.Errorf("%w: %d: want 1 to %d", ErrPartitions, count, MaxPartitions)
	}
	return nil
}

// UpgradeCommand is the command that runs streams.Ensure from the jetflow
// CLI with the deployment's own settings (streams.DeployedConfig); the
// fixes that streams.Check and Ensure give name it.
const UpgradeCommand = "jetflow upgrade"
