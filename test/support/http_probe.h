// Raw HTTP on loopback for the tests of the metrics endpoints: a request sent
// byte for byte (also malformed ones a real client would never send) and the
// answer as the server wrote it, plus reading one sample of the Prometheus
// text format.
#pragma once

#include <string>

namespace blockcsi::testing {

// Sends `request` as is to 127.0.0.1:`port`; returns what came back until the
// server closed or `timeout_s` passed without a byte ("" when it did not connect).
std::string HttpExchange(int port, const std::string& request, int timeout_s = 2);

// The body of GET `path`, or "" when the answer was not a 200.
std::string HttpGetBody(int port, const std::string& path, int timeout_s = 2);

// The value of the sample written exactly as `series` (name{labels}), or -1.
double MetricSample(const std::string& text, const std::string& series);

}  // namespace blockcsi::testing
