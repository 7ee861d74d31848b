module github.com/sluicehq/sluice

go 1.26.0

require golang.org/x/time v0.16.0 // indirect
