package config

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/idemgate/idemgate/job"
)

// Fairness is one entry of fairness: a pool in which the jobs that name
// it (jobs[].fairness) wait for their turn, shared between tenants in
// proportion to their weights, across every worker.
type Fairness struct {
	// Name is how jobs[].fairness refers to it: required, unique,
	// [a-z0-9_.:-]+. It labels the pool's metrics and names its admin
	// endpoint (/admin/fairness/{name}).
	Name string `yaml:"name"`
	// DefaultWeight is the weight of a tenant weights does not name, a
	// positive number. Default 1.
	DefaultWeight *float64 `yaml:"default_weight"`
	// Weights are tenants' weights, positive numbers: while both have
	// jobs waiting, a tenant of weight 3 gets three dispatches for every
	// one of a tenant of weight 1. Default none: every tenant has
	// default_weight.
	Weights map[string]float64 `yaml:"weights"`
	// Window is the most of the pool's jobs handed to asynq at once, at
	// least 1. Default job.DefaultFairWindow, 64.
	Window *int `yaml:"window"`
}

// validateFairness checks fairness: and keeps the pools for FairPools.
func (c *Config) validateFairness(bad badFunc) {
	c.fairPools = nil
	names := map[string]int{}
	for i, f := range c.Fairness {
		at := fmt.Sprintf("fairness[%d]", i)
		ok := true
		fail := func(key, format string, args ...any) {
			ok = false
			bad(key, format, args...)
		}
		switch {
		case f.Name == "":
			fail(at+".name", "required: the name jobs use it by, like tenants")
		case !validTask(f.Name):
			fail(at+".name", "%q may only contain a-z, 0-9, '_', '.', ':' and '-'", f.Name)
		default:
			if _, dup := names[f.Name]; dup {
				ok = false
			}
			distinct(bad, names, "fairness", i, "name", f.Name)
		}
		pool := job.FairPool{Name: f.Name, DefaultWeight: 1, Window: job.DefaultFairWindow, Weights: maps.Clone(f.Weights)}
		if f.DefaultWeight != nil {
			if !positiveWeight(*f.DefaultWeight) {
				fail(at+".default_weight", "must be a positive number, not %v", *f.DefaultWeight)
			}
			pool.DefaultWeight = *f.DefaultWeight
		}
		for _, t := range slices.Sorted(maps.Keys(f.Weights)) {
			if !positiveWeight(f.Weights[t]) {
				fail(fmt.Sprintf("%s.weights.%s", at, t), "must be a positive number, not %v", f.Weights[t])
			}
		}
		if f.Window != nil {
			if *f.Window < 1 {
				fail(at+".window", "must be at least 1, not %d", *f.Window)
			}
			pool.Window = *f.Window
		}
		if ok {
			c.fairPools = append(c.fairPools, pool)
		}
	}
}

func positiveWeight(w float64) bool { return w > 0 && !math.IsInf(w, 0) && !math.IsNaN(w) }

// fairnessProblem says what is wrong with the pool a job names, or "".
func (c *Config) fairnessProblem(name string) string {
	for _, f := range c.Fairness {
		if f.Name == name {
			return ""
		}
	}
	var known []string
	for _, f := range c.Fairness {
		if f.Name != "" {
			known = append(known, f.Name)
		}
	}
	if len(known) == 0 {
		return fmt.Sprintf("%q is not a declared fairness pool; declare it under fairness", name)
	}
	return fmt.Sprintf("%q is not a declared fairness pool (declared: %s)", name, strings.Join(known, ", "))
}

// FairPools returns the valid fairness pools in declaration order.
func (c *Config) FairPools() []job.FairPool { return c.fairPools }
