package toa

import "errors"

// ErrNoContext is what Load's error wraps when the folder has no context.toa.yaml.
var ErrNoContext = errors.New("no " + ContextFile)
