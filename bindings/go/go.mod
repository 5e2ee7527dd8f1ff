module example.com/cgc

go 1.19
