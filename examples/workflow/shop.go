package main

import (
	"errors"
	"fmt"
	"sync"
)

// The fake services of the example: an inventory, a payment gateway that
// answers 503 to the first call for one order, and a carrier that refuses
// one address. All are idempotent by key, as services called from retried
// tasks should be.

var errUnavailable = errors.New("payment gateway: 503 service unavailable")

type inventory struct {
	mu       sync.Mutex
	stock    map[string]int
	reserved map[string]int // by reservation key
}

func newInventory() *inventory {
	return &inventory{stock: map[string]int{"lamp": 10, "desk": 2, "chair": 5}, reserved: map[string]int{}}
}

// reserve takes qty of sku out of stock under key; it does nothing the
// second time for the same key.
func (inv *inventory) reserve(key, sku string, qty int) error {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if _, done := inv.reserved[key]; done {
		return nil
	}
	if inv.stock[sku] < qty {
		return fmt.Errorf("only %d %s left, %d wanted", inv.stock[sku], sku, qty)
	}
	inv.stock[sku] -= qty
	inv.reserved[key] = qty
	return nil
}

// release puts a reservation back; it does nothing for an unknown key.
func (inv *inventory) release(key, sku string) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if qty, ok := inv.reserved[key]; ok {
		inv.stock[sku] += qty
		delete(inv.reserved, key)
	}
}

func (inv *inventory) level(sku string) int {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.stock[sku]
}

type gateway struct {
	mu       sync.Mutex
	flaky    string         // order ID whose first charge fails with 503
	calls    map[string]int // charge calls by order ID
	charged  map[string]int // cents by idempotency key
	refunded map[string]int
}

func newGateway(flaky string) *gateway {
	return &gateway{flaky: flaky, calls: map[string]int{}, charged: map[string]int{}, refunded: map[string]int{}}
}

func (g *gateway) charge(key, orderID string, cents int) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls[orderID]++
	if orderID == g.flaky && g.calls[orderID] == 1 {
		return "", errUnavailable
	}
	g.charged[key] = cents
	return "pay-" + key, nil
}

func (g *gateway) refund(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if cents, ok := g.charged[key]; ok {
		g.refunded[key] = cents
		delete(g.charged, key)
	}
}

func (g *gateway) totals() (charged, refunded int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.charged {
		charged += c
	}
	for _, c := range g.refunded {
		refunded += c
	}
	return charged, refunded
}

type carrier struct {
	refuse string // address the carrier does not deliver to
}

func (c carrier) ship(address string) (string, error) {
	if address == c.refuse {
		return "", fmt.Errorf("carrier: no delivery to %q", address)
	}
	return "parcel-" + address, nil
}
