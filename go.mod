module github.com/capalloc/capalloc

go 1.25.0

require (
	github.com/ebitengine/purego v0.11.3
	github.com/stretchr/testify v1.12.1
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect
