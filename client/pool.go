package client

import (
	"context"
	"errors"
	"sync"
)

// A Pool runs several executions at once against one relayd, one per
// connection as the protocol requires: it keeps idle connections for reuse
// and dials new ones up to its size.
type Pool struct {
	dial  func(context.Context) (*Conn, error)
	slots chan struct{} // one per connection in use

	mu     sync.Mutex
	idle   []*Conn
	closed bool
}

// NewPool returns a Pool of at most size connections (at least 1) made by
// dial, for example:
//
//	pool := client.NewPool(8, func(ctx context.Context) (*client.Conn, error) {
//		return client.Dial(ctx, addr, token)
//	})
func NewPool(size int, dial func(context.Context) (*Conn, error)) *Pool {
	return &Pool{dial: dial, slots: make(chan struct{}, max(size, 1))}
}

// Execute runs req on a connection of the pool, waiting within ctx for one
// to be free. A connection that ends with the call is dropped, not reused.
func (p *Pool) Execute(ctx context.Context, req Request) (Executed, error) {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return Executed{}, ctx.Err()
	}
	defer func() { <-p.slots }()
	c, err := p.get(ctx)
	if err != nil {
		return Executed{}, err
	}
	e, err := c.Execute(ctx, req)
	p.put(c)
	return e, err
}

func (p *Pool) get(ctx context.Context) (*Conn, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	if n := len(p.idle); n > 0 {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	return p.dial(ctx)
}

// put keeps c for reuse if it is still open.
func (p *Pool) put(c *Conn) {
	c.mu.Lock()
	over := c.err != nil
	c.mu.Unlock()
	p.mu.Lock()
	if over || p.closed {
		p.mu.Unlock()
		c.Close()
		return
	}
	p.idle = append(p.idle, c)
	p.mu.Unlock()
}

// Close closes the idle connections; connections in use are closed when
// their Execute returns.
func (p *Pool) Close() error {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	var errs []error
	for _, c := range idle {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
