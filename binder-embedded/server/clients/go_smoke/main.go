// Command go_smoke runs the Go client amqp091-go against an AMQP 0-9-1 broker: publish with
// confirms, consume with prefetch and manual acks, and the refusals RabbitMQ gives for the same
// mistakes (the same scenario as ../pika_smoke.py).
//
//	go run . -port 5673 [-host 127.0.0.1] [-messages 1000] [-prefetch 10]
//
// Every check prints one line ("ok - ..." or "FAIL - ..."); the last line is
// "go_smoke: N passed, N failed". The exit status is 1 when any check failed, 2 when the broker
// could not be reached. Only names it creates ("go-smoke-" and a random suffix) are used, and
// deleted, so it can also be pointed at a RabbitMQ to check the smoke itself.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// checks counts and prints the checks.
type checks struct {
	passed, failed int
}

func (c *checks) check(ok bool, name string, detail string) bool {
	if ok {
		c.passed++
		fmt.Printf("ok - %s\n", name)
	} else {
		c.failed++
		if detail != "" {
			fmt.Printf("FAIL - %s: %s\n", name, detail)
		} else {
			fmt.Printf("FAIL - %s\n", name)
		}
	}
	return ok
}

// broker says where the broker under test is.
type broker struct {
	host  string
	port  int
	vhost string
}

func (b broker) url(user, password, vhost string) string {
	return fmt.Sprintf("amqp://%s:%s@%s:%d/%s", user, password, b.host, b.port,
		strings.ReplaceAll(vhost, "/", "%2f"))
}

func (b broker) dial(user, password, vhost string) (*amqp.Connection, error) {
	return amqp.DialConfig(b.url(user, password, vhost), amqp.Config{
		Heartbeat: 10 * time.Second,
		Dial:      amqp.DefaultDial(5 * time.Second),
	})
}

func suffix() string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return fmt.Sprintf("%d", time.Now().UnixNano())
	}
	return hex.EncodeToString(b)
}

// amqpError gives the broker's error carried by err, if any.
func amqpError(err error) *amqp.Error {
	var e *amqp.Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

func capabilities(c *checks, conn *amqp.Connection) {
	for _, name := range []string{
		"publisher_confirms", "basic.nack", "consumer_cancel_notify",
		"exchange_exchange_bindings", "connection.blocked", "per_consumer_qos",
	} {
		capabilities, _ := conn.Properties["capabilities"].(amqp.Table)
		c.check(capabilities[name] == true, "capability "+name, fmt.Sprint(capabilities))
	}
}

func publishWithConfirms(c *checks, ch *amqp.Channel, exchange, queue string, count int) error {
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("confirm.select: %w", err)
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	ctx := context.Background()
	started := time.Now()
	pending := make([]*amqp.DeferredConfirmation, 0, count)
	for i := 0; i < count; i++ {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, "k", true, false,
			amqp.Publishing{
				ContentType:  "text/plain",
				DeliveryMode: amqp.Transient,
				MessageId:    fmt.Sprint(i),
				Headers:      amqp.Table{"i": int32(i), "smoke": "go"},
				Body:         []byte(fmt.Sprintf("message %d", i)),
			})
		if err != nil {
			return fmt.Errorf("publish %d: %w", i, err)
		}
		pending = append(pending, dc)
	}
	nacked := 0
	for _, dc := range pending {
		if !dc.Wait() {
			nacked++
		}
	}
	c.check(nacked == 0, fmt.Sprintf("%d publishes confirmed (%.2f s)", count,
		time.Since(started).Seconds()), fmt.Sprintf("%d nacked", nacked))
	select {
	case r := <-returns:
		c.check(false, "no message returned", fmt.Sprintf("%d %s", r.ReplyCode, r.ReplyText))
	default:
	}

	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, "no-such-key", true, false,
		amqp.Publishing{Body: []byte("lost")})
	if err != nil {
		return fmt.Errorf("unroutable publish: %w", err)
	}
	select {
	case r := <-returns:
		c.check(r.ReplyCode == 312 && string(r.Body) == "lost",
			"mandatory unroutable publish is returned (312 NO_ROUTE)",
			fmt.Sprintf("%d %s", r.ReplyCode, r.ReplyText))
	case <-time.After(5 * time.Second):
		c.check(false, "mandatory unroutable publish is returned", "no basic.return in 5 s")
	}
	c.check(dc.Wait(), "the returned publish is still confirmed (acked)", "nacked")

	q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("passive declare: %w", err)
	}
	c.check(q.Messages == count, fmt.Sprintf("passive declare counts %d ready", count),
		fmt.Sprintf("messages=%d", q.Messages))
	return nil
}

// consumeWithPrefetch consumes count messages with basic.qos(prefetch) and manual acks. Every
// tenth full window is held unacknowledged for 200 ms: the broker must not send more meanwhile.
func consumeWithPrefetch(c *checks, ch *amqp.Channel, queue string, count, prefetch int) error {
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return fmt.Errorf("basic.qos: %w", err)
	}
	deliveries, err := ch.Consume(queue, "go-smoke", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("basic.consume: %w", err)
	}
	var unacked []amqp.Delivery
	received, maxUnacked, windows, held := 0, 0, 0, 0
	orderOK, propsOK, freshOK := true, true, true
	ackAll := func(multiple bool) error {
		if len(unacked) == 0 {
			return nil
		}
		if multiple {
			if err := unacked[len(unacked)-1].Ack(true); err != nil {
				return err
			}
		} else {
			for _, d := range unacked {
				if err := d.Ack(false); err != nil {
					return err
				}
			}
		}
		unacked = unacked[:0]
		return nil
	}
	take := func(d amqp.Delivery) {
		if string(d.Body) != fmt.Sprintf("message %d", received) {
			orderOK = false
		}
		if d.MessageId != fmt.Sprint(received) || d.Headers["i"] != int32(received) ||
			d.Headers["smoke"] != "go" {
			propsOK = false
		}
		if d.Redelivered {
			freshOK = false
		}
		received++
		unacked = append(unacked, d)
		if len(unacked) > maxUnacked {
			maxUnacked = len(unacked)
		}
	}
	for received < count {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return errors.New("the delivery channel closed")
			}
			take(d)
		case <-time.After(10 * time.Second):
			c.check(false, "consumer received everything", fmt.Sprintf("stalled at %d", received))
			return nil
		}
		if len(unacked) < prefetch && received < count {
			continue
		}
		windows++
		if windows%10 == 1 && received < count {
			select {
			case d, ok := <-deliveries:
				if ok {
					take(d) // beyond the window: counted in maxUnacked
				}
			case <-time.After(200 * time.Millisecond):
				held++
			}
		}
		if err := ackAll(windows%2 == 0); err != nil {
			return fmt.Errorf("basic.ack: %w", err)
		}
	}
	if err := ch.Cancel("go-smoke", false); err != nil {
		return fmt.Errorf("basic.cancel: %w", err)
	}
	c.check(received == count, fmt.Sprintf("consumed %d", count), fmt.Sprintf("received %d", received))
	c.check(orderOK, "deliveries in publish order", "")
	c.check(propsOK, "headers and message-id kept", "")
	c.check(freshOK, "no delivery flagged redelivered", "")
	c.check(maxUnacked <= prefetch, fmt.Sprintf("at most %d unacked at a time", prefetch),
		fmt.Sprintf("saw %d unacked", maxUnacked))
	c.check(held >= 5, "a full window held back further deliveries", fmt.Sprintf("held %d windows", held))
	q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("passive declare: %w", err)
	}
	c.check(q.Messages == 0 && q.Consumers == 0, "queue empty after acks",
		fmt.Sprintf("messages=%d consumers=%d", q.Messages, q.Consumers))
	return nil
}

func getNackReject(c *checks, ch *amqp.Channel, exchange, queue string) error {
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), exchange, "k", false,
		false, amqp.Publishing{Body: []byte("again")})
	if err != nil {
		return err
	}
	dc.Wait()
	d, ok, err := ch.Get(queue, false)
	if err != nil {
		return fmt.Errorf("basic.get: %w", err)
	}
	if !c.check(ok && string(d.Body) == "again" && !d.Redelivered, "basic.get returns the message", "") {
		return nil
	}
	if err := d.Nack(false, true); err != nil {
		return fmt.Errorf("basic.nack: %w", err)
	}
	d, ok, err = ch.Get(queue, false)
	if err != nil {
		return fmt.Errorf("basic.get: %w", err)
	}
	if !c.check(ok && string(d.Body) == "again" && d.Redelivered, "nack with requeue: redelivered", "") {
		return nil
	}
	if err := d.Reject(false); err != nil {
		return fmt.Errorf("basic.reject: %w", err)
	}
	_, ok, err = ch.Get(queue, false)
	if err != nil {
		return fmt.Errorf("basic.get: %w", err)
	}
	c.check(!ok, "reject without requeue: gone (get-empty)", "")
	return nil
}

// channelRefusal checks that err is the broker closing the channel with code and a text
// starting with prefix, and that the channel is closed afterwards.
func channelRefusal(c *checks, ch *amqp.Channel, err error, name string, code int, prefix string) {
	e := amqpError(err)
	c.check(e != nil && e.Code == code && strings.HasPrefix(e.Reason, prefix) && e.Server,
		fmt.Sprintf("%s: %d %s", name, code, prefix), fmt.Sprint(err))
	c.check(ch.IsClosed(), name+": channel closed", "")
}

func refusals(c *checks, b broker) error {
	conn, err := b.dial("guest", "wrong-password", b.vhost)
	if err == nil {
		conn.Close()
	}
	// amqp091-go does not announce authentication_failure_close: the broker drops the
	// socket and the client reports ErrCredentials.
	c.check(errors.Is(err, amqp.ErrCredentials), "wrong password refused (ErrCredentials)", fmt.Sprint(err))

	conn, err = b.dial("guest", "guest", "go-smoke-no-such-vhost")
	if err == nil {
		conn.Close()
	}
	// The client turns any failure of connection.open into ErrVhost.
	c.check(errors.Is(err, amqp.ErrVhost), "unknown vhost refused (ErrVhost)", fmt.Sprint(err))

	conn, err = b.dial("guest", "guest", b.vhost)
	if err != nil {
		return err
	}
	defer conn.Close()
	missing := "go-smoke-missing-" + suffix()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	_, err = ch.QueueDeclarePassive(missing, false, false, false, false, nil)
	channelRefusal(c, ch, err, "passive declare of a missing queue", 404, "NOT_FOUND")

	if ch, err = conn.Channel(); err != nil {
		return err
	}
	err = ch.ExchangeDeclarePassive(missing, "direct", false, false, false, false, nil)
	channelRefusal(c, ch, err, "passive declare of a missing exchange", 404, "NOT_FOUND")

	if ch, err = conn.Channel(); err != nil {
		return err
	}
	if _, err = ch.QueueDeclare(missing, false, true, false, false, nil); err != nil {
		return err
	}
	_, err = ch.QueueDeclare(missing, true, false, false, false, nil)
	channelRefusal(c, ch, err, "redeclare with other properties", 406, "PRECONDITION_FAILED")

	c.check(!conn.IsClosed(), "the connection survives channel errors", "")
	if ch, err = conn.Channel(); err != nil {
		return err
	}
	if _, err = ch.QueueDelete(missing, false, false, false); err != nil {
		return err
	}
	return connectionRefusal(c, b)
}

// connectionRefusal checks a connection-level error: basic.qos with a prefetch size is 540
// NOT_IMPLEMENTED, which closes the connection.
func connectionRefusal(c *checks, b broker) error {
	conn, err := b.dial("guest", "guest", b.vhost)
	if err != nil {
		return err
	}
	defer conn.Close()
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	err = ch.Qos(10, 4096, false)
	e := amqpError(err)
	c.check(e != nil && e.Code == 540 && strings.HasPrefix(e.Reason, "NOT_IMPLEMENTED"),
		"basic.qos with a prefetch size: 540 NOT_IMPLEMENTED", fmt.Sprint(err))
	select {
	case e := <-closed:
		c.check(e != nil && e.Code == 540, "basic.qos with a prefetch size: connection closed",
			fmt.Sprint(e))
	case <-time.After(5 * time.Second):
		c.check(false, "basic.qos with a prefetch size: connection closed", "still open after 5 s")
	}
	return nil
}

func run(c *checks, b broker, count, prefetch int) error {
	conn, err := b.dial("guest", "guest", b.vhost)
	if err != nil {
		return err
	}
	defer conn.Close()
	capabilities(c, conn)
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	s := suffix()
	exchange, queue := "go-smoke-x-"+s, "go-smoke-q-"+s
	if err := ch.ExchangeDeclare(exchange, "direct", false, false, false, false, nil); err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
		return err
	}
	if err := ch.QueueBind(queue, "k", exchange, false, nil); err != nil {
		return err
	}
	if err := publishWithConfirms(c, ch, exchange, queue, count); err != nil {
		return err
	}
	if err := consumeWithPrefetch(c, ch, queue, count, prefetch); err != nil {
		return err
	}
	if err := getNackReject(c, ch, exchange, queue); err != nil {
		return err
	}
	if _, err := ch.QueueDelete(queue, false, false, false); err != nil {
		return err
	}
	if err := ch.ExchangeDelete(exchange, false, false); err != nil {
		return err
	}
	return refusals(c, b)
}

func main() {
	var b broker
	flag.StringVar(&b.host, "host", "127.0.0.1", "broker host")
	flag.IntVar(&b.port, "port", 0, "broker port (required)")
	flag.StringVar(&b.vhost, "vhost", "/", "virtual host")
	count := flag.Int("messages", 1000, "messages to publish and consume")
	prefetch := flag.Int("prefetch", 10, "basic.qos prefetch count")
	flag.Parse()
	if b.port == 0 {
		fmt.Fprintln(os.Stderr, "go_smoke: -port is required")
		os.Exit(2)
	}
	probe, err := b.dial("guest", "guest", b.vhost)
	if err != nil {
		fmt.Printf("go_smoke: cannot connect to %s:%d: %v\n", b.host, b.port, err)
		os.Exit(2)
	}
	probe.Close()
	c := &checks{}
	if err := run(c, b, *count, *prefetch); err != nil {
		c.check(false, "no unexpected client error", err.Error())
	}
	fmt.Printf("go_smoke: %d passed, %d failed\n", c.passed, c.failed)
	if c.failed > 0 {
		os.Exit(1)
	}
}
