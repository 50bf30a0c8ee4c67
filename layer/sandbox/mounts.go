package sandbox

// MountTargets are the places, inside the root, where a run of a command with binds mounts
// something over the root: what the sandbox makes only to mount over (an empty file, the folders
// on the way) is in the overlay's upper folder, and a layer of the run's changes leaves it out.
func MountTargets(binds []Bind) []string {
	targets := []string{"/proc", "/dev"}
	for _, b := range runnerBinds() {
		targets = append(targets, b.Target)
	}
	for _, b := range binds {
		targets = append(targets, b.Target)
	}
	return targets
}
