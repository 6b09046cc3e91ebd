// Package source is where configs come from: the Source interface, the
// file source (--config, watched) and the xDS source (--xds-server, a SotW
// ADS subscription through pkg/xdsconfig), one chosen by New from the
// settings. State puts every outcome a source delivers, the first load
// included, into force or keeps the config in force and the errors, for
// /config's source and status, the metrics and the logs.
//
// Every source builds its configs with pkg/descriptors. It imports
// internal/settings and pkg/ packages; internal/app imports it.
package source
