module stream-broker/clients/go_smoke

go 1.19

require github.com/rabbitmq/amqp091-go v1.5.0

// Debian's golang-github-rabbitmq-amqp091-go-dev: no module download.
replace github.com/rabbitmq/amqp091-go => /usr/share/gocode/src/github.com/rabbitmq/amqp091-go
