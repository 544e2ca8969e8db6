// The etcd client's encoding helpers and its failure paths, without etcd:
// answers as etcd's gateway writes them (int64 as strings, defaults left
// out, keys and values in base64).
#include <gtest/gtest.h>

#include "proto/etcd/client.h"

namespace lt::proto::etcd {
namespace {

TEST(EtcdClient, Base64RoundTripsAnyBytes) {
  const std::string raw("a\0b\xff/\x01", 6);
  std::string back;
  ASSERT_TRUE(unb64(b64(raw), &back));
  EXPECT_EQ(back, raw);
  EXPECT_EQ(b64("a"), "YQ==");
  EXPECT_FALSE(unb64("not base64!", &back));
}

TEST(EtcdClient, PrefixEndCoversExactlyThePrefix) {
  EXPECT_EQ(prefix_end("/ltier/members/"), "/ltier/members0");
  EXPECT_EQ(prefix_end(std::string("a\xff", 2)), "b");
  EXPECT_EQ(prefix_end(std::string("\xff\xff", 2)), std::string(1, '\0'));
}

TEST(EtcdClient, ReadsInt64sAsTheGatewayWritesThem) {
  Json j = Json::parse(R"({"revision":"42","count":7,"flag":true})");
  EXPECT_EQ(num(j, "revision"), 42);
  EXPECT_EQ(num(j, "count"), 7);
  EXPECT_EQ(num(j, "missing"), 0);
  EXPECT_EQ(num(j, "flag"), 0);
  EXPECT_EQ(num(Json::array(), "revision"), 0);
}

TEST(EtcdClient, DecodesRangeAndTxnAnswers) {
  Json range = Json::parse(R"({"header":{"revision":"9"},"kvs":[
      {"key":"YQ==","create_revision":"2","mod_revision":"5","version":"1","value":"MQ==",
       "lease":"77"},
      {"key":"Yg==","create_revision":"3","mod_revision":"3"},
      {"key":"@@@","value":"MQ=="}],"count":"3"})");
  std::vector<Kv> kvs = kvs_of(range);
  ASSERT_EQ(kvs.size(), 2u);  // the key that is not base64 is dropped
  EXPECT_EQ(kvs[0].key, "a");
  EXPECT_EQ(kvs[0].value, "1");
  EXPECT_EQ(kvs[0].create_rev, 2);
  EXPECT_EQ(kvs[0].mod_rev, 5);
  EXPECT_EQ(kvs[0].lease, 77);
  EXPECT_EQ(kvs[1].value, "");  // an empty value is left out

  Json failed = Json::parse(R"({"header":{},"responses":[{"response_range":
      {"kvs":[{"key":"YQ==","value":"MQ=="}]}}]})");
  EXPECT_FALSE(succeeded(failed));  // "succeeded": false is left out
  ASSERT_EQ(txn_kvs(failed, 0).size(), 1u);
  EXPECT_TRUE(txn_kvs(failed, 1).empty());
  EXPECT_TRUE(succeeded(Json::parse(R"({"succeeded":true})")));
  EXPECT_FALSE(succeeded(Json::parse(R"({"succeeded":"yes"})")));
}

TEST(EtcdClient, BuildsRequestsInTheGatewaysShape) {
  Json t = txn(Json::array({compare_rev("k", "CREATE", 0)}), Json::array({put_of("k", "v", 5)}));
  EXPECT_EQ(t["compare"][0]["target"], "CREATE");
  EXPECT_EQ(t["compare"][0]["create_revision"], "0");
  EXPECT_EQ(t["success"][0]["request_put"]["key"], b64("k"));
  EXPECT_EQ(t["success"][0]["request_put"]["lease"], "5");
  EXPECT_FALSE(put_of("k", "v")["request_put"].contains("lease"));
  EXPECT_EQ(delete_prefix("p/")["request_delete_range"]["range_end"], b64("p0"));
}

TEST(EtcdClient, EndpointsAreNormalizedAndUnreachableOnesReportPeerDown) {
  Client none(" , ");
  EXPECT_FALSE(none.valid());
  EXPECT_EQ(none.call("/v3/kv/range", Json::object(), Deadline::after_ms(100)).status().code(),
            Code::kInvalidArg);
  Client c("127.0.0.1:1/, http://127.0.0.1:2");
  ASSERT_TRUE(c.valid());
  EXPECT_EQ(c.current(), "http://127.0.0.1:1");
  Result<Json> r = c.call("/v3/kv/range", Json{{"key", b64("a")}}, Deadline::after_ms(2000));
  EXPECT_EQ(r.status().code(), Code::kPeerDown);
  EXPECT_EQ(c.call("/v3/kv/range", Json::object(), Deadline(0)).status().code(), Code::kTimedOut);
}

}  // namespace
}  // namespace lt::proto::etcd
