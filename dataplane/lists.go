package dataplane

import (
	"cmp"
	"slices"

	controllerv1 "github.com/switchboard-mesh/switchboard/gen/switchboard/controller/v1"
)

// connectionList answers ConnectionListRequest from the datapath: one entry per link
// id of every live connection, dialed or accepted (the route reconciler needs the
// accepted side of a link too). Connections the CP did not ask for carry no link id
// and are not reported.
func (c *Controller) connectionList() *controllerv1.ConnectionListResponse {
	v := c.view()
	out := &controllerv1.ConnectionListResponse{}
	for link, id := range v.byLink {
		out.Entries = append(out.Entries, &controllerv1.ConnectionEntry{
			LinkId: link, Endpoint: v.byID[id].Endpoint, ConnId: uint64(id),
		})
	}
	slices.SortFunc(out.Entries, func(a, b *controllerv1.ConnectionEntry) int { return cmp.Compare(a.LinkId, b.LinkId) })
	return out
}

// subscriptionList answers SubscriptionListRequest from the datapath: one entry per
// (subscription, link id of its connection).
func (c *Controller) subscriptionList() *controllerv1.SubscriptionListResponse {
	v := c.view()
	links := v.linksOf()
	out := &controllerv1.SubscriptionListResponse{}
	for _, si := range c.dp.Subscriptions() {
		for _, link := range links[si.Conn] {
			out.Subscriptions = append(out.Subscriptions, si.Name.toProto(link))
		}
	}
	slices.SortFunc(out.Subscriptions, func(a, b *controllerv1.Subscription) int {
		return cmp.Or(cmp.Compare(a.LinkId, b.LinkId), cmp.Compare(a.Component_0, b.Component_0),
			cmp.Compare(a.Component_1, b.Component_1), cmp.Compare(a.Component_2, b.Component_2),
			cmp.Compare(a.GetComponentId(), b.GetComponentId()))
	})
	return out
}
