// Package modeltest holds replaysafe's reference model of the dispatch rules
// and the tests that compare package fsm with it.
//
// The model (model.go) is a plain function over a whole trace: the request
// facts, the phase limits and every event so far. It is written from the
// rule statements in spec/ruledata, read in precedence order, and from the
// ordering facts the fsm documentation states (which event may follow
// which); it imports only fsm's data types and never runs an fsm.Machine.
// It is deliberately naive: every question it asks ("was a request byte
// written?", "when did the header phase open?") is answered by scanning the
// events again, so it shares no state, and no bug, with the machine.
//
// The rest of the package compares the two: Check (compare.go) explains a
// difference by a known divergence or reports it, Invariants
// (invariants.go) checks the safety properties every decision must keep,
// and Property (property.go) is the rapid state-machine property that the
// tests run and that fuzz/ reuses as a fuzz target.
package modeltest
