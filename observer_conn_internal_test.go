package replaysafe

import (
	"testing"

	"github.com/replaysafe/replaysafe/internal/driver"
)

// TestConnEventValuesMatchDriver: config.go converts the driver's
// connection event kinds and close reasons into the face's by value;
// every one must land on its namesake, so a value added or moved on one
// side alone fails here.
func TestConnEventValuesMatchDriver(t *testing.T) {
	kinds := map[driver.ConnEventKind]ConnEventKind{
		driver.ConnEventNone: connEventNone, driver.ConnDialed: ConnDialed,
		driver.ConnReused: ConnReused, driver.ConnClosed: ConnClosed,
	}
	for d, f := range kinds {
		if ConnEventKind(d) != f {
			t.Errorf("driver kind %d converts to %v, want %v", d, ConnEventKind(d), f)
		}
	}
	reasons := map[driver.CloseReason]ConnCloseReason{
		driver.CloseNone: connCloseNone, driver.CloseIdle: ConnCloseIdle, driver.CloseDiscarded: ConnCloseDiscarded,
		driver.CloseGoAway: ConnCloseGoAway, driver.CloseBroken: ConnCloseBroken, driver.CloseTakenOver: ConnCloseTakenOver,
	}
	for d, f := range reasons {
		if ConnCloseReason(d) != f {
			t.Errorf("driver reason %d converts to %v, want %v", d, ConnCloseReason(d), f)
		}
	}
	if len(kinds) != int(driver.ConnClosed)+1 || len(reasons) != int(driver.CloseTakenOver)+1 {
		t.Errorf("the tables above miss a value: %d kinds, %d reasons", len(kinds), len(reasons))
	}
}
