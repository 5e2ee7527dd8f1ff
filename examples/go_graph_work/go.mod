module example.com/cgc/examples/graph_work

go 1.19

require example.com/cgc v0.0.0

// The binding lives in this repository; building needs no download.
replace example.com/cgc => ../../bindings/go
