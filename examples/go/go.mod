module cgc/examples/fork_join

go 1.19

require cgc/bindings/go v0.0.0

// The binding lives in this repository; building needs no download.
replace cgc/bindings/go => ../../bindings/go
