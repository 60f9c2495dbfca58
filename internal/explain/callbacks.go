package explain

import (
	"context"
	"fmt"

	"github.com/idemgate/idemgate/job"
	"github.com/idemgate/idemgate/openapi"
)

// addCallbacks adds the job's final-status callbacks (on_final) and every
// recorded attempt of each.
func (x *Explainer) addCallbacks(ctx context.Context, s *Story, id string) error {
	states, err := job.NewCallbacks(x.DB).OfJob(ctx, id)
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	for _, c := range states {
		sc := openapi.StoryCallback{
			WebhookId: c.ID, Event: openapi.StoryCallbackEvent(c.Event), State: "pending", CreatedAt: c.CreatedAt,
			Attempts: c.Attempts, DueAt: c.DueAt, DeliveredAt: c.DeliveredAt, AbandonedAt: c.AbandonedAt,
			LastStatus: c.LastStatus, LastError: c.LastError, Tries: []openapi.StoryCallbackAttempt{},
		}
		switch {
		case c.DeliveredAt != nil:
			sc.State = "delivered"
		case c.AbandonedAt != nil:
			sc.State = "abandoned"
		}
		for _, a := range c.Tries {
			sc.Tries = append(sc.Tries, openapi.StoryCallbackAttempt{Attempt: a.Attempt, Worker: a.Worker, StartedAt: a.StartedAt,
				EndedAt: a.EndedAt, Status: a.Status, Outcome: openapi.StoryCallbackAttemptOutcome(a.Outcome), Error: a.Error})
		}
		if s.Callbacks == nil {
			s.Callbacks = &[]openapi.StoryCallback{}
		}
		*s.Callbacks = append(*s.Callbacks, sc)
	}
	return nil
}

// writeCallbacks writes the callbacks' rows of the text story.
func writeCallbacks(p func(string, ...any), s *Story) {
	if s.Callbacks == nil {
		return
	}
	for i, c := range *s.Callbacks {
		label := ""
		if i == 0 {
			label = "callbacks"
		}
		line := fmt.Sprintf("%s %s: %s after %d attempt(s)", c.WebhookId, c.Event, c.State, c.Attempts)
		switch c.State {
		case "pending":
			line += ", next " + c.DueAt.UTC().Format(stamp)
		case "delivered":
			line += ", " + timeText(c.DeliveredAt)
		case "abandoned":
			line += ", " + timeText(c.AbandonedAt)
		}
		p("%s\t%s\n", label, line)
		for _, a := range c.Tries {
			p("\t  #%d %s %s by %s at %s: %s\n", a.Attempt, a.Outcome, statusText(a.Status), dash(a.Worker),
				a.StartedAt.UTC().Format(stamp), dash(oneLine(strText(a.Error))))
		}
	}
}
