module cgc/bindings/go

go 1.19
