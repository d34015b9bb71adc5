package workers

// The retry policy is unexported: RiverConfig installs it. Its tests, in
// package workers_test, reach it through these names.
type (
	RetryPolicy       = retryPolicy
	RetryPolicyConfig = retryPolicyConfig
)

var NewRetryPolicy = newRetryPolicy
