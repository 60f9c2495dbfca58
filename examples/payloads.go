package examples

// The example tasks: stable names on the wire, declared in JobsYAML with
// the schemas their payloads are validated against before a handler runs.
const (
	TaskInvoiceCreate    = "invoice.create"
	TaskInventoryAdjust  = "inventory.adjust"
	TaskPaymentCharge    = "payment.charge"
	TaskNotificationSend = "notification.send"
)

// Tasks lists the example tasks, in the order Register adds them.
func Tasks() []string {
	return []string{TaskInvoiceCreate, TaskInventoryAdjust, TaskPaymentCharge, TaskNotificationSend}
}

// InvoiceCreate creates the one invoice of an order. Business key
// invoice:{order_id}, resource order:{order_id}.
type InvoiceCreate struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

// InventoryAdjust applies one stock movement, once per adjustment id.
// Business key inventory:{adjustment_id}, resource sku:{sku}.
type InventoryAdjust struct {
	AdjustmentID string `json:"adjustment_id"`
	SKU          string `json:"sku"`
	Delta        int64  `json:"delta"`
}

// PaymentCharge charges a payment at the partner, once. Business key and
// resource payment:{payment_id}.
type PaymentCharge struct {
	PaymentID   string `json:"payment_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

// NotificationSend sends one message per (template, user, event). Business
// key email:{template}:{user_id}:{event_id}, resource user:{user_id}.
type NotificationSend struct {
	EventID  string `json:"event_id"`
	UserID   string `json:"user_id"`
	Template string `json:"template"`
}
