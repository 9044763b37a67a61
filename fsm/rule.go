package fsm

//go:generate go run ../spec/internal/genrules -o rule_gen.go

import "strconv"

// String prints the rule's slug, or Rule(n) for a value outside the table.
func (r Rule) String() string {
	if r < RuleCount {
		return ruleSlugs[r]
	}
	return "Rule(" + strconv.Itoa(int(r)) + ")"
}

// ID returns the rule's stable short identifier, such as "RS20", or "" for
// a value outside the table.
func (r Rule) ID() string {
	if r < RuleCount {
		return ruleIDs[r]
	}
	return ""
}

// ParseRule finds a rule by its slug or its ID.
func ParseRule(s string) (Rule, bool) {
	for i := range RuleCount {
		if ruleSlugs[i] == s || ruleIDs[i] == s {
			return Rule(i), true
		}
	}
	return 0, false
}
