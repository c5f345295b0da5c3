module github.com/tailcut/hedge

go 1.26.8

require github.com/benbjohnson/clock v1.3.5
